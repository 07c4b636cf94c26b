#!/usr/bin/env python3
"""Replicas of `oscar serve` behind sglang-router (PyPI, pinned in scripts/requirements.txt).

For each routing policy, on fresh replicas (empty prefix caches): starts N `oscar serve`
replicas on loopback (with --device cuda, replica i on GPU i through CUDA_VISIBLE_DEVICES),
starts the router in front of them (`python -m sglang_router.launch_router --policy P`), sends
the workload's requests through the router with C client threads, and stops everything.

Workloads:
  docs       many questions about a few long documents: --docs documents of --doc-tokens
             tokens cut from --text, each sent alone first (as a system prompt or an uploaded
             file is; max_tokens 1), then the questions: each request one document (each as
             often, in a fixed shuffled order) followed by a question of its own. A router that
             sends a document's questions to the replica that holds it lets that replica's
             prefix cache serve the document. (Sent first with a question instead, a quantized
             cache would hit only the sink for the next question: docs/server.md.)
  reasoning  short prompts, each its own slice of --text (no shared prefix), and long answers.

Reported per policy (one JSON row each; --out appends them to a results file {"device",
"date", "commit", "command", "rows"}): whole-run output tokens/s (all output tokens over the
wall time from the first question sent to the last answer), prefix hit rate (the answers.
usage of the questions: Σ cached_tokens / Σ prompt_tokens), TTFT p50 and p99, and the prompt
tokens each replica computed (its oscar_prompt_tokens_total).

  serve_replicas.py --oscar build/oscar --model M --replicas 2 --policies cache_aware,round_robin \
      --workload docs --docs 4 --doc-tokens 1500 --requests 32 --concurrency 4 --max-tokens 16
"""
import argparse
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_load  # noqa: E402  (run_one, percentile, append_row)

CHARS_PER_TOKEN = serve_load.CHARS_PER_TOKEN


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--oscar", required=True, help="the oscar binary")
    p.add_argument("--model", required=True, help="model file every replica serves")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--policies", default="cache_aware,round_robin", help="comma-separated sglang-router policies")
    p.add_argument("--workload", choices=["docs", "reasoning"], default="docs")
    p.add_argument("--text", default=os.environ.get("OSCAR_EVAL_TEXT", os.path.expanduser("~/.cache/oscar/data/eval.txt")),
                   help="text the documents, questions and prompts are cut from")
    p.add_argument("--docs", type=int, default=4, help="docs: documents")
    p.add_argument("--doc-tokens", type=int, default=1500, help="docs: tokens per document (approximate)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="reasoning: prompt tokens; docs: question tokens")
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--serve-args", default="", help="more `oscar serve` arguments for every replica (quoted)")
    p.add_argument("--timeout", type=float, default=900, help="seconds for each policy's run")
    p.add_argument("--out", default=None, help="results JSON file to append the rows to")
    p.add_argument("--label", default=None)
    args = p.parse_args(argv)
    if args.replicas < 1 or args.requests < 1 or args.concurrency < 1 or args.docs < 1:
        p.error("--replicas, --requests, --concurrency and --docs must be positive")
    return args


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, seconds, proc=None, what="server"):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it answered {url}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer {url} within {seconds:.0f} s")


class Replica:
    def __init__(self, args, index, log_dir):
        self.port = free_port()
        self.log_path = os.path.join(log_dir, f"replica{index}.log")
        env = dict(os.environ)
        if args.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = str(index)
        cmd = [args.oscar, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(self.port),
               "--model-name", "oscar", "--device", args.device] + shlex.split(args.serve_args)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def prompt_tokens(self):
        text = httpx.get(self.url + "/metrics", timeout=10).text
        m = re.search(r"^oscar_prompt_tokens_total\s+([0-9.e+]+)", text, re.M)
        return int(float(m.group(1))) if m else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Router:
    def __init__(self, urls, policy, log_dir):
        self.port = free_port()
        self.log = open(os.path.join(log_dir, f"router_{policy}.log"), "w")
        cmd = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(self.port),
               "--policy", policy, "--log-level", "warn", "--worker-urls"] + urls
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def prompts(args):
    """(documents sent first, the run's prompts in sending order)."""
    text = open(args.text, encoding="utf-8", errors="replace").read()
    q_chars = args.prompt_tokens * CHARS_PER_TOKEN
    if args.workload == "reasoning":
        need = args.requests * q_chars
        if len(text) < need:
            raise SystemExit(f"--text holds {len(text)} characters; {args.requests} prompts need {need}")
        return [], [text[i * q_chars:(i + 1) * q_chars] for i in range(args.requests)]
    d_chars = args.doc_tokens * CHARS_PER_TOKEN
    need = args.docs * d_chars + args.requests * q_chars
    if len(text) < need:
        raise SystemExit(f"--text holds {len(text)} characters; {args.docs} documents and {args.requests} questions need {need}")
    docs = [text[i * d_chars:(i + 1) * d_chars] for i in range(args.docs)]
    base = args.docs * d_chars
    # Each document as often as the others, in a fixed shuffled order: in turn, a round robin
    # over as many replicas as documents would keep each document on one replica by chance.
    order = [i % args.docs for i in range(args.requests)]
    random.Random(0).shuffle(order)
    return docs, [docs[d] + "\n\nQuestion: " + text[base + i * q_chars:base + (i + 1) * q_chars]
                  for i, d in enumerate(order)]


def run_policy(args, policy, first, todo):
    log_dir = tempfile.mkdtemp(prefix=f"oscar-replicas-{policy}-")
    replicas, router = [], None
    try:
        replicas = [Replica(args, i, log_dir) for i in range(args.replicas)]
        for r in replicas:
            wait_http(r.url + "/health", 600, r.proc, f"replica on port {r.port} (log {r.log_path})")
        router = Router([r.url for r in replicas], policy, log_dir)
        wait_http(router.url + "/v1/models", 60, router.proc, "sglang-router")
        client_args = types.SimpleNamespace(model="oscar", max_tokens=args.max_tokens, endpoint="completions")
        with httpx.Client(base_url=router.url) as client:  # the documents, one at a time
            warm = types.SimpleNamespace(model="oscar", max_tokens=1, endpoint="completions")
            for doc in first:
                r = serve_load.run_one(client, warm, doc, time.monotonic() + args.timeout)
                if r["error"]:
                    raise RuntimeError(f"sending a document: {r['error']}")
        results = [None] * len(todo)
        next_i = [0]
        lock = threading.Lock()
        deadline = time.monotonic() + args.timeout

        def worker():
            with httpx.Client(base_url=router.url) as client:
                while True:
                    with lock:
                        i = next_i[0]
                        next_i[0] += 1
                    if i >= len(todo):
                        return
                    results[i] = serve_load.run_one(client, client_args, todo[i], deadline)

        t0 = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        ok = [r for r in results if r and not r["error"] and r["usage"]]
        out_tokens = sum(r["usage"].get("completion_tokens", 0) for r in ok)
        prompt_tokens = sum(r["usage"].get("prompt_tokens", 0) for r in ok)
        cached = sum((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0 for r in ok)
        ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
        row = {
            "bench": "replicas", "replicas": args.replicas, "policy": policy, "workload": args.workload,
            "device": args.device, "requests": len(todo), "completed": len(ok), "clients": args.concurrency,
            "max_tokens": args.max_tokens,
            "doc_tokens": args.doc_tokens if args.workload == "docs" else None,
            "docs": args.docs if args.workload == "docs" else None,
            "whole_run_tokens_per_s": round(out_tokens / wall, 2) if wall > 0 else None,
            "seconds": round(wall, 2), "output_tokens": out_tokens, "prompt_tokens": prompt_tokens,
            "prefix_hit_rate": round(cached / prompt_tokens, 4) if prompt_tokens else None,
            "ttft_p50": round(serve_load.percentile(ttft, 50), 3) if ttft else None,
            "ttft_p99": round(serve_load.percentile(ttft, 99), 3) if ttft else None,
            "prompt_tokens_per_replica": [r.prompt_tokens() for r in replicas],
            "errors": sorted({r["error"] for r in results if r and r["error"]})[:3],
            "label": args.label,
        }
        return row
    finally:
        if router:
            router.stop()
        for r in replicas:
            r.stop()


def main(argv):
    args = parse_args(argv)
    first, todo = prompts(args)
    rows = []
    for policy in [p for p in args.policies.split(",") if p]:
        row = run_policy(args, policy, first, todo)
        print(json.dumps(row), flush=True)
        rows.append(row)
        if args.out:
            serve_load.append_row(args.out, row, "python3 bench/serve_replicas.py " + shlex.join(argv))
    return 0 if all(r["completed"] == r["requests"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
