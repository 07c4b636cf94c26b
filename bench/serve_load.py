#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server on this machine (oscar serve, llama.cpp's).

N client threads send streaming /v1/completions (or /v1/chat/completions) requests back to
back until R requests have been sent or --timeout seconds have passed; each request's prompt
is its own slice of --prompts-file, so no two prompts share a prefix (a prefix cache never
hits). Prints one JSON row; --out appends it to a results file
{"device", "date", "commit", "command", "rows": [...]}.

Measured per request: TTFT (send -> first non-empty content chunk), inter-token latency (gaps
between non-empty content chunks: one chunk is one token on both servers, except where a
server holds text back for a stop string or an incomplete UTF-8 character), output tokens
(usage.completion_tokens from the final usage chunk if the server sends one, else the number
of non-empty content chunks). While the load runs, GET /metrics is polled every 100 ms for
oscar's `oscar_requests_running` gauge; its maximum is `sequences_admitted` (null where the
server has no such gauge).

  serve_load.py --base-url http://127.0.0.1:8080 --model m --concurrency 4 --requests 8 \
      --prompt-tokens 1000 --max-tokens 64 --server oscar --kv bf16 --out res.json --label x
"""
import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.parse

import httpx

CHARS_PER_TOKEN = 4  # prompts are cut by characters; English text runs ~4 characters a token
LOOPBACK_HOSTS = {"127.0.0.1", "localhost"}
MAX_REQUESTS = 100_000
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="http://127.0.0.1:PORT (loopback only), with or without /v1")
    p.add_argument("--api-key", default=os.environ.get("OSCAR_API_KEY"), help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--model", default="default", help="model name sent in each request")
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--prompts-file", default=os.environ.get("OSCAR_EVAL_TEXT", os.path.expanduser("~/.cache/oscar/data/eval.txt")),
                   help="text the prompts are cut from (default $OSCAR_EVAL_TEXT)")
    p.add_argument("--prompt-tokens", type=int, default=1000, help="approximate prompt length (cut at 4 characters a token)")
    p.add_argument("--token-prompts", type=int, default=0, metavar="VOCAB",
                   help="send each prompt as --prompt-tokens random token ids in [0, VOCAB) (completions only; "
                        "for models with random weights, where text means nothing)")
    p.add_argument("--shared-prefix-tokens", type=int, default=0, metavar="N",
                   help="every prompt starts with the same N tokens (--token-prompts) or N·4 characters (a prefix "
                        "cache's workload: one long document, many questions); the rest of each prompt is its own")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens of each request (temperature 0)")
    p.add_argument("--first-prompt", type=int, default=0,
                   help="index of the first prompt slice: runs against one server use disjoint ranges, so that "
                        "no prompt is in its prefix cache")
    p.add_argument("--concurrency", type=int, default=1, help="client threads, each sending requests back to back")
    p.add_argument("--requests", type=int, default=4, help="requests in all")
    p.add_argument("--timeout", type=float, default=600, help="seconds for the whole run; requests still open then fail")
    p.add_argument("--server", default=None, help="row label for the server (default: oscar if /metrics has its gauges, else llama.cpp)")
    p.add_argument("--kv", default=None, help="row label for the KV cache type")
    p.add_argument("--out", default=None, help="results JSON file to append the row to (made if absent)")
    p.add_argument("--label", default=None, help="row label")
    a = p.parse_args(argv)
    if a.concurrency < 1 or a.first_prompt < 0 or a.requests < 1 or a.requests > MAX_REQUESTS:
        p.error(f"--concurrency must be >= 1, --first-prompt >= 0 and --requests in [1, {MAX_REQUESTS}]")
    if a.prompt_tokens < 1 or a.max_tokens < 1 or not (0 < a.timeout <= 24 * 3600):
        p.error("--prompt-tokens and --max-tokens must be >= 1, --timeout in (0, 86400]")
    if not 0 <= a.shared_prefix_tokens < a.prompt_tokens:
        p.error("--shared-prefix-tokens must be in [0, --prompt-tokens)")
    url = urllib.parse.urlsplit(a.base_url)
    if url.scheme != "http" or url.hostname not in LOOPBACK_HOSTS:
        p.error(f"--base-url {a.base_url!r}: only http://127.0.0.1 or http://localhost is allowed (loopback only)")
    a.root = f"{url.scheme}://{url.netloc}"  # /metrics lives here; the API under /v1
    return a


def cut_prompts(path, first, n, chars):
    """Slices first .. first+n-1 of about `chars` characters each, disjoint, starting on a word."""
    text = open(path, encoding="utf-8", errors="replace").read()
    if len(text) < (first + n + 1) * chars:
        raise SystemExit(f"{path}: {len(text)} characters cannot give prompts {first}..{first + n - 1} of {chars} characters")
    prompts = []
    for i in range(first, first + n):
        start = i * chars
        space = text.find(" ", start, start + 200)  # begin on a word, not inside one
        start = space + 1 if space >= 0 else start
        prompts.append(text[start:start + chars])
    return prompts


def percentile(xs, q):
    """Linear interpolation between closest ranks (numpy's default); None if empty."""
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class MetricsPoller(threading.Thread):
    """Polls GET /metrics every 100 ms; keeps the maximum of oscar_requests_running."""

    def __init__(self, root, headers):
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=root, headers=headers, timeout=2.0)
        self.stop_event = threading.Event()
        self.running_max = None  # None: the server has no such gauge

    def read(self):
        try:
            r = self.client.get("/metrics")
        except httpx.HTTPError:
            return {}
        if r.status_code != 200:
            return {}
        out = {}
        for m in re.finditer(r"^(oscar_requests_running|oscar_preemptions_total|oscar_engine_steps_total|"
                             r"oscar_engine_seconds_total\{part=\"(?:forward|host)\"\}) (\S+)$", r.text, re.M):
            out[m.group(1)] = float(m.group(2))
        return out

    def run(self):
        while not self.stop_event.is_set():
            v = self.read().get("oscar_requests_running")
            if v is None and self.running_max is None:
                return  # no such gauge (llama.cpp): polling a 404 ten times a second only costs the server CPU
            if v is not None:
                self.running_max = max(self.running_max or 0, int(v))
            self.stop_event.wait(0.1)


def run_one(client, args, prompt, deadline):
    """One streaming request; returns a dict of its measurements (error set on failure)."""
    body = {"model": args.model, "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.endpoint == "chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        path = "/v1/completions"
        body["prompt"] = prompt
    res = {"ttft": None, "gaps": [], "times": [], "chunks": 0, "usage": None, "error": None}
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        res["error"] = "deadline before send"
        return res
    t_send = time.monotonic()
    t_last = None
    done = False
    try:
        timeout = httpx.Timeout(connect=10.0, read=remaining, write=10.0, pool=10.0)
        with client.stream("POST", path, json=body, timeout=timeout) as r:
            if r.status_code != 200:
                res["error"] = f"HTTP {r.status_code}: {r.read().decode(errors='replace')[:200]}"
                return res
            for line in r.iter_lines():
                if time.monotonic() > deadline:
                    res["error"] = "deadline (--timeout) reached mid-stream"
                    return res
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if chunk.get("error"):
                    res["error"] = f"stream error: {json.dumps(chunk['error'])[:200]}"
                    return res
                if chunk.get("usage"):
                    res["usage"] = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    text = choice.get("text") if args.endpoint == "completions" else (choice.get("delta") or {}).get("content")
                    if not text:
                        continue
                    now = time.monotonic()
                    if t_last is None:
                        res["ttft"] = now - t_send
                    else:
                        res["gaps"].append(now - t_last)
                    t_last = now
                    res["times"].append(now)
                    res["chunks"] += 1
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        res["error"] = f"{type(e).__name__}: {e}"[:200]
        return res
    if not done:
        res["error"] = "stream ended without [DONE]"
    return res


def full_batch_window(results):
    """(tokens/s, seconds, ITL p50 ms) over [last first token, first last token] across streams."""
    if not results or any(len(r["times"]) < 2 for r in results):
        return None
    start = max(r["times"][0] for r in results)
    end = min(r["times"][-1] for r in results)
    if end - start < 1.0:  # under a second says nothing steady
        return None
    tokens = sum(sum(1 for t in r["times"] if start < t <= end) for r in results)
    gaps = [(b - a) * 1e3 for r in results for a, b in zip(r["times"], r["times"][1:]) if start < b <= end]
    return tokens / (end - start), end - start, percentile(gaps, 50)


def run_load(args):
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    if args.token_prompts > 0:
        import random
        prompts = []
        for i in range(args.first_prompt, args.first_prompt + args.requests):
            rng = random.Random(1000 + i)  # seeded per prompt: disjoint runs stay disjoint
            prompts.append([rng.randrange(args.token_prompts) for _ in range(args.prompt_tokens)])
        if args.shared_prefix_tokens:
            rng = random.Random(999)
            shared = [rng.randrange(args.token_prompts) for _ in range(args.shared_prefix_tokens)]
            prompts = [shared + q[args.shared_prefix_tokens:] for q in prompts]
    else:
        prompts = cut_prompts(args.prompts_file, args.first_prompt, args.requests, args.prompt_tokens * CHARS_PER_TOKEN)
        if args.shared_prefix_tokens:
            n = args.shared_prefix_tokens * CHARS_PER_TOKEN
            shared = cut_prompts(args.prompts_file, args.first_prompt + args.requests, 1, n)[0]
            prompts = [shared + q[n:] for q in prompts]
    poller = MetricsPoller(args.root, headers)
    before = poller.read()
    poller.start()
    lock = threading.Lock()
    next_index = [0]
    results = []
    t_start = time.monotonic()
    deadline = t_start + args.timeout
    finish = [t_start]

    def worker():
        with httpx.Client(base_url=args.root, headers=headers) as client:
            while True:
                with lock:
                    i = next_index[0]
                    if i >= args.requests or time.monotonic() > deadline:
                        return
                    next_index[0] += 1
                res = run_one(client, args, prompts[i], deadline)
                with lock:
                    results.append(res)
                    finish[0] = max(finish[0], time.monotonic())

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline + 15 - time.monotonic()))  # a stuck read cannot hold the run
    poller.stop_event.set()
    poller.join(2)
    after = poller.read()
    wall = finish[0] - t_start
    ok = [r for r in results if r["error"] is None]
    failed = len(results) - len(ok) + (args.requests - len(results))  # never sent counts as failed
    out_tokens = [r["usage"]["completion_tokens"] if r["usage"] and "completion_tokens" in r["usage"] else r["chunks"] for r in ok]
    prompt_measured = [r["usage"]["prompt_tokens"] for r in ok if r["usage"] and "prompt_tokens" in r["usage"]]
    cached = [(r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") for r in ok if r["usage"]]
    cached = [c for c in cached if isinstance(c, int)]
    ttft = [r["ttft"] * 1e3 for r in ok if r["ttft"] is not None]
    itl = [g * 1e3 for r in ok for g in r["gaps"]]
    full = full_batch_window(ok) if len(ok) == args.requests == args.concurrency else None
    preempt = None
    if "oscar_preemptions_total" in before and "oscar_preemptions_total" in after:
        preempt = int(after["oscar_preemptions_total"] - before["oscar_preemptions_total"])
    def delta(name):
        return after[name] - before[name] if name in before and name in after else None
    steps = delta("oscar_engine_steps_total")
    fwd, host = delta('oscar_engine_seconds_total{part="forward"}'), delta('oscar_engine_seconds_total{part="host"}')
    server = args.server or ("oscar" if poller.running_max is not None else "llama.cpp")
    r2 = lambda x: None if x is None else round(x, 2)
    row = {
        "label": args.label, "server": server, "kv": args.kv, "concurrency": args.concurrency,
        "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens, "requests": args.requests,
        "output_tokens_per_s": r2(sum(out_tokens) / wall) if ok and wall > 0 else None,
        "ttft_ms_p50": r2(percentile(ttft, 50)), "ttft_ms_p99": r2(percentile(ttft, 99)),
        "itl_ms_p50": r2(percentile(itl, 50)), "itl_ms_p99": r2(percentile(itl, 99)),
        "sequences_admitted": poller.running_max, "failed": failed,
        # extras: what the row's numbers rest on
        "completed": len(ok), "output_tokens": sum(out_tokens),
        "output_tokens_min": min(out_tokens) if out_tokens else None,
        "prompt_tokens_measured_mean": r2(sum(prompt_measured) / len(prompt_measured)) if prompt_measured else None,
        "shared_prefix_tokens": args.shared_prefix_tokens,
        "cached_prompt_tokens_mean": r2(sum(cached) / len(cached)) if cached else None,
        "usage_chunks": sum(1 for r in ok if r["usage"]), "wall_s": round(wall, 3), "preemptions": preempt,
        # Decode at full batch: output tokens/s while every stream is past its first token
        # and none has finished (all requests sent at once); None when that window is empty.
        "full_batch_output_tokens_per_s": r2(full[0]) if full else None,
        "full_batch_window_s": r2(full[1]) if full else None,
        "full_batch_itl_ms_p50": r2(full[2]) if full else None,
        # where the engine's step time went (oscar only): the runner's forward, then sampling and streaming
        "engine_steps": int(steps) if steps is not None else None,
        "engine_forward_ms_per_step": r2(fwd * 1e3 / steps) if steps else None,
        "engine_host_ms_per_step": r2(host * 1e3 / steps) if steps else None,
        "errors": sorted({r["error"] for r in results if r["error"]})[:3],
    }
    return row


def machine_doc(command):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    # OSCAR_COMMIT first: a GPU machine's copy of the tree may carry a stale .git.
    commit = os.environ.get("OSCAR_COMMIT") or subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    device = f"CPU: {cpu}, {os.cpu_count()} cores"
    try:  # the GPU, where there is one
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10).stdout.strip().splitlines()
        if gpu:
            device = f"{gpu[0]} ({device})"
    except (OSError, subprocess.SubprocessError):
        pass
    return {"device": device, "date": datetime.date.today().isoformat(),
            "commit": commit or None, "command": command.replace(os.path.expanduser("~"), "~"), "rows": []}


def append_row(path, row, command):
    doc = json.load(open(path)) if os.path.exists(path) else machine_doc(command)
    doc["rows"].append(row)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main(argv):
    args = parse_args(argv)
    row = run_load(args)
    print(json.dumps(row))
    if args.out:
        shown = ["***" if i and argv[i - 1] == "--api-key" else a for i, a in enumerate(argv)]
        shown = [re.sub(r"^(--api-key=).*", r"\1***", a) for a in shown]
        append_row(args.out, row, shlex.join([os.path.relpath(os.path.abspath(__file__), REPO)] + shown))
    return 0 if row["completed"] else 1  # the row is written either way; a run with no answer fails


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
