#!/usr/bin/env python3
"""Soak test of `oscar serve` on this machine (loopback only, bounded in count and time).

Starts the server (meant for a build with ASan and UBSan: scripts/soak.sh builds one) on the
default model, gets each prompt's greedy output from quiet requests first, then runs waves
of load for --seconds in all:
  - --clients streaming clients back to back, over the server's sequence and KV capacity
    (--max-seqs, --kv-mem; --output-reserve 0 by default), so that the queue and preemption work;
  - --disconnect of their requests leave mid-stream;
  - --bad of them are malformed (truncated JSON, wrong types, negative or huge numbers, a
    10 MB body, a 64 KB header, invalid UTF-8, empty messages), each of which must get a 4xx;
  - --stalled connections that send part of a request and wait, kept open all along.
After each wave the server must come back to its idle KV pages (/metrics). Pass means: the
server never dies, no sanitizer report in its log (LeakSanitizer's at exit included), every
bad request answered 4xx, every other request either finished with its quiet greedy text or
was refused 429/503 with Retry-After (never cut mid-stream), pages back to idle after each
wave, the live heap (/metrics oscar_heap_live_bytes) after the run within --max-heap-growth (5 %) of
the heap after the warm-up, and RSS after the run within --max-rss-growth (5 %) of RSS after the warm-up (--warmup-waves, the
first wave by default: an ASan build's allocator keeps growing its per-thread caches for a few
minutes of this load). Prints and (--out)
writes one JSON row; exits 1 on any failure.

  serve_soak.py --oscar build-fuzz/oscar --model M.gguf --text eval.txt --seconds 60

On a GPU (--device cuda) the server can run under a checker, e.g.
  --wrap "compute-sanitizer --tool memcheck"; its reports count as sanitizer reports, and the
RSS checked is the server's own, not the checker's.
"""
import argparse
import datetime
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

SANITIZER = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: UndefinedBehaviorSanitizer"
                       r"|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]")


def start_server(a, log_path):
    cmd = a.wrap.split() + [a.oscar, "serve", "-m", a.model, "--kv", a.kv, "-c", str(a.ctx), "--max-seqs",
                            str(a.max_seqs), "--kv-mem", str(a.kv_mem), "--port", "0", "-t", str(a.threads),
                            "--model-name", "soak", "--device", a.device, "--output-reserve", str(a.output_reserve)]
    log = open(log_path, "w")
    # A small quarantine: ASan's default keeps 256 MB of freed memory, and 1 MB more in each
    # of the server's ~270 threads, which reads as RSS growth (docs/reliability.md).
    asan = "detect_leaks=1:abort_on_error=0:quarantine_size_mb=16:thread_local_quarantine_size_kb=64"
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("SOAK_ASAN_OPTIONS", asan),
               UBSAN_OPTIONS="print_stacktrace=1")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
        if m:
            return proc, int(m.group(1)), cmd
        if proc.poll() is not None:
            sys.exit(f"server exited ({proc.returncode}):\n" + open(log_path).read()[-3000:])
        time.sleep(0.2)
    proc.kill()
    sys.exit("server not listening after 300 s")


def metrics(url):
    text = httpx.get(url + "/metrics", timeout=30).text
    vals = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, v = line.rpartition(" ")
        key = name.split("{")[0]
        vals[key] = vals.get(key, 0.0) + float(v)
        if key != name:
            vals[name] = float(v)  # each labelled series too
    return vals


def server_pid(proc, a):
    """The server's own process: proc itself, or under --wrap the descendant running oscar."""
    if not a.wrap:
        return proc.pid
    todo = [proc.pid]
    while todo:
        pid = todo.pop()
        try:
            if os.path.basename(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode()) == \
                    os.path.basename(a.oscar):
                return pid
            for t in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except OSError:
            continue
    return proc.pid


def proc_status(pid, field):
    """A number from /proc/PID/status (VmRSS in kB, Threads), 0 when absent."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def raw_request(port, head: bytes, body: bytes, timeout=30):
    """Sends a request over its own socket; returns the status code (0: no answer)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(head + b"\r\n" + body)
        except OSError:
            pass  # the server may answer (413, 431) and close before reading it all
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
        return int(m.group(1)) if m else 0
    except OSError:
        return 0
    finally:
        s.close()


def bad_requests(port):
    def post(body: bytes, extra=b""):
        return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
                b"Content-Length: " + str(len(body)).encode() + b"\r\n", body)
    chat = lambda body: (post(body)[0].replace(b"/v1/completions", b"/v1/chat/completions"), body)
    return {
        "truncated_json": post(b'{"prompt": "Once upon", "max_tok'),
        "wrong_types": post(b'{"prompt": 5, "max_tokens": "many"}'),
        "negative_max_tokens": post(b'{"prompt": "x", "max_tokens": -5}'),
        "huge_temperature": post(b'{"prompt": "x", "max_tokens": 2, "temperature": 1e300}'),
        "huge_max_tokens": post(b'{"prompt": "x", "max_tokens": 100000000000000000000}'),
        "body_10mb": post(b'{"prompt": "' + b"a" * (10 << 20) + b'"}'),
        "header_64kb": post(b'{"prompt": "x", "max_tokens": 2}', b"X-Big: " + b"a" * (64 << 10) + b"\r\n"),
        "invalid_utf8": post(b'{"prompt": "\xff\xfe\xfd", "max_tokens": 2}'),
        "empty_messages": chat(b'{"messages": []}'),
        "no_body": post(b""),
    }


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}
        self.failures = []

    def add(self, key, n=1):
        with self.lock:
            self.c[key] = self.c.get(key, 0) + n

    def fail(self, msg):
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(msg)
            self.c["failures"] = self.c.get("failures", 0) + 1


def stream(client, url, body, leave_after=None):
    """Returns (status, text, finish_reason, retry_after, done, events)."""
    text, fin, events = "", None, 0
    with client.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, "", None, r.headers.get("retry-after"), False, 0
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                return 200, text, fin, None, True, events
            events += 1
            ch = json.loads(data)["choices"][0]
            text += ch.get("text") or ""
            fin = ch.get("finish_reason") or fin
            if leave_after is not None and events >= leave_after:
                return 200, text, fin, None, False, events  # leaving closes the connection
    return 200, text, fin, None, False, events


def client_loop(a, url, port, prompts, refs, bads, stop, stats, rng):
    while not stop.is_set():
        r = rng.random()
        if r < a.bad:
            name, (head, body) = rng.choice(list(bads.items()))
            code = raw_request(port, head, body)
            stats.add("bad")
            if 400 <= code < 500:
                stats.add("bad_4xx")
            else:
                stats.fail(f"bad request {name}: HTTP {code}")
            continue
        i = rng.randrange(len(prompts))
        body = {"model": "soak", "prompt": prompts[i], "max_tokens": a.max_tokens, "temperature": 0, "stream": True}
        leave = rng.randint(1, 4) if r < a.bad + a.disconnect else None
        try:
            with httpx.Client() as c:
                status, text, fin, retry, done, events = stream(c, url, body, leave)
        except (httpx.HTTPError, OSError) as e:
            stats.fail(f"request: {type(e).__name__}: {e}")
            continue
        if status in (429, 503):
            stats.add("refused")
            if retry is None:
                stats.fail(f"HTTP {status} without Retry-After")
        elif status != 200:
            stats.fail(f"HTTP {status}")
        elif leave is not None:
            stats.add("disconnects")
        elif not done:
            stats.fail("a stream ended without [DONE]")
        else:
            stats.add("completed")
            if text != refs[i]:
                stats.fail(f"prompt {i}: greedy output under load differs from the quiet run: {text!r} vs {refs[i]!r}")
        stats.add("requests")


def staller_loop(port, n, stop, stats):
    socks = []
    while not stop.is_set():
        while len(socks) < n:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
                s.setblocking(False)
                socks.append(s)
                stats.add("stalled_opened")
            except OSError:
                break
        keep = []
        for s in socks:
            try:
                if s.recv(4096) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            keep.append(s)
        socks = keep
        time.sleep(0.2)
    for s in socks:
        s.close()


def wait_idle(url, pages0, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = metrics(url)
        if m.get("oscar_requests_running", 0) == 0 and m.get("oscar_requests_waiting", 0) == 0 and \
                m.get("oscar_kv_pages_used", 0) == pages0:
            return True, m
        time.sleep(0.25)
    return False, metrics(url)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oscar", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True, help="text the prompts are cut from")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--waves", type=int, default=3)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--stalled", type=int, default=200)
    ap.add_argument("--disconnect", type=float, default=0.3)
    ap.add_argument("--bad", type=float, default=0.1)
    ap.add_argument("--kv", default="int2-hadamard")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--max-seqs", type=int, default=8)
    ap.add_argument("--kv-mem", type=float, default=24, help="MiB of KV: less than --max-seqs full sequences")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--prompt-chars", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--output-reserve", type=float, default=0.0,
                    help="the server's --output-reserve: 0 admits by the prompt alone and preempts when pages run out")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--wrap", default="", help="a command the server runs under (compute-sanitizer ...)")
    ap.add_argument("--warmup-waves", type=int, default=1, help="waves before the RSS baseline (at least 1)")
    ap.add_argument("--max-heap-growth", type=float, default=0.05,
                    help="bound on the live heap's growth after the warm-up (/metrics oscar_heap_live_bytes)")
    ap.add_argument("--max-rss-growth", type=float, default=0.05,
                    help="largest RSS growth from the end of the warm-up to the last wave (a fraction)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not 1 <= a.warmup_waves <= a.waves:
        ap.error("--warmup-waves must lie in [1, --waves]")
    text = open(a.text, encoding="utf-8", errors="replace").read()
    rng = random.Random(a.seed)
    prompts = [text[o:o + a.prompt_chars] for o in (rng.randrange(0, len(text) - a.prompt_chars - 1) for _ in range(8))]
    tmp = tempfile.mkdtemp(prefix="oscar-soak-")
    log_path = os.path.join(tmp, "serve.log")
    proc, port, cmd = start_server(a, log_path)
    url = f"http://127.0.0.1:{port}"
    stats = Stats()
    row = {"bench": "soak", "command": " ".join(cmd), "seconds": a.seconds, "clients": a.clients,
           "stalled": a.stalled, "disconnect_fraction": a.disconnect, "bad_fraction": a.bad}
    try:
        refs = []
        with httpx.Client() as c:
            for p in prompts:
                r = c.post(url + "/v1/completions", timeout=600,
                           json={"model": "soak", "prompt": p, "max_tokens": a.max_tokens, "temperature": 0})
                r.raise_for_status()
                refs.append(r.json()["choices"][0]["text"])
        ok, m0 = wait_idle(url, metrics(url)["oscar_kv_pages_used"])
        pages0 = m0.get("oscar_kv_pages_used", 0)
        bads = bad_requests(port)
        stop_stall = threading.Event()
        staller = threading.Thread(target=staller_loop, args=(port, a.stalled, stop_stall, stats), daemon=True)
        staller.start()
        rss, heap, waves = [], [], []
        for w in range(a.waves):
            stop = threading.Event()
            threads = [threading.Thread(target=client_loop, daemon=True,
                                        args=(a, url, port, prompts, refs, bads, stop, stats, random.Random(a.seed * 1000 + w * 100 + k)))
                       for k in range(a.clients)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            peak_wait = 0
            while time.monotonic() - t0 < a.seconds / a.waves:
                if proc.poll() is not None:
                    raise RuntimeError(f"the server died (exit {proc.returncode})")
                peak_wait = max(peak_wait, metrics(url).get("oscar_requests_waiting", 0))
                time.sleep(1)
            stop.set()
            for t in threads:
                t.join(600)
            idle, m = wait_idle(url, pages0)
            if not idle:
                stats.fail(f"wave {w}: not back to idle: running {m.get('oscar_requests_running')}, waiting "
                           f"{m.get('oscar_requests_waiting')}, pages {m.get('oscar_kv_pages_used')} (idle {pages0})")
            pid = server_pid(proc, a)
            rss.append(proc_status(pid, "VmRSS"))
            heap.append(m.get("oscar_heap_live_bytes", -1))
            waves.append({"wave": w, "pages_after": m.get("oscar_kv_pages_used"), "rss_kb": rss[-1],
                          "heap_live_bytes": heap[-1], "threads": proc_status(pid, "Threads"), "peak_waiting": peak_wait})
        stop_stall.set()
        staller.join(30)
        base = rss[min(a.warmup_waves, len(rss)) - 1]
        growth = (rss[-1] - base) / base if len(rss) > a.warmup_waves else 0.0
        if growth > a.max_rss_growth:
            stats.fail(f"RSS grew {growth * 100:.1f} % from the end of wave {a.warmup_waves - 1} to the last ({rss})")
        # The live heap as the allocator counts it (/metrics), beside RSS: growth of the one
        # without the other is the allocator keeping freed memory, not the server holding it.
        hbase = heap[min(a.warmup_waves, len(heap)) - 1]
        heap_growth = (heap[-1] - hbase) / hbase if len(heap) > a.warmup_waves and hbase > 0 else None
        if heap_growth is not None and heap_growth > a.max_heap_growth:
            stats.fail(f"the live heap grew {heap_growth * 100:.1f} % from the end of wave {a.warmup_waves - 1} "
                       f"to the last ({heap})")
        row.update({"waves": waves, "pages_idle": pages0, "rss_growth": round(growth, 4),
                    "heap_growth": None if heap_growth is None else round(heap_growth, 4),
                    "preemptions": metrics(url).get("oscar_preemptions_total")})
        m = metrics(url)
        row["resumed_tokens"] = {src: m.get(f'oscar_resumed_tokens_total{{source="{src}"}}')
                                 for src in ("swapped", "kept", "recomputed")}
    except Exception as e:  # noqa: BLE001
        stats.fail(f"{type(e).__name__}: {e}")
    finally:
        if proc.poll() is None:
            os.kill(server_pid(proc, a), signal.SIGTERM)  # the server itself: a checker may not pass it on
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                stats.fail("the server did not exit 120 s after SIGTERM")
        if proc.returncode not in (0, None):
            stats.fail(f"server exit code {proc.returncode}")
        log = open(log_path, errors="replace").read()
        reports = SANITIZER.findall(log)
        if reports:
            stats.fail(f"{len(reports)} sanitizer reports in {log_path}: " + log[log.find(reports[0][0]) - 200:][:1500])
    row.update(stats.c)
    row["bad_4xx_rate"] = (stats.c.get("bad_4xx", 0) / stats.c["bad"]) if stats.c.get("bad") else None
    row["failures_list"] = stats.failures
    if stats.failures:
        print(f"the server's log ({log_path}), last lines:\n" + "\n".join(log.splitlines()[-30:]), file=sys.stderr)
    row["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(json.dumps(row, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"date": row["date"], "command": " ".join(sys.argv), "rows": [row]}, f, indent=1)
    ok = not stats.failures and stats.c.get("completed", 0) > 0
    print("soak:", "PASS" if ok else "FAIL", f"({stats.c.get('requests', 0)} requests, "
          f"{stats.c.get('completed', 0)} completed, {stats.c.get('disconnects', 0)} disconnects, "
          f"{stats.c.get('bad', 0)} bad, {stats.c.get('refused', 0)} refused)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
