#!/usr/bin/env python3
"""End-to-end tests of `oscar serve`, the OpenAI-compatible HTTP server.

Starts real servers on ephemeral loopback ports (one process per configuration, reused
across tests), drives them with the official `openai` client and raw `httpx`, and checks
greedy output against `oscar run`. A plain script, no pytest: it prints `ok   NAME` or
`FAIL NAME: reason` per test, then `N passed, M failed`, and exits 1 on any failure.

Usage: server_test.py --oscar build/oscar --model MODEL.gguf --calib-text calib.txt
                      [--eval-text eval.txt] [--only NAME[,NAME...]] [-v]
"""
from __future__ import annotations

import argparse
import atexit
import ctypes
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

try:
    import httpx
    import openai
except ImportError as _e:  # the venv predates scripts/requirements.txt's openai/httpx pins
    print(f"0 passed, 1 failed (python package missing: {_e.name}; pip install -r scripts/requirements.txt)")
    sys.exit(1)

API_KEY = "oscar-test-key"
MODEL_NAME = "oscar-test-model"
CTX = 512          # -c: context per sequence of the test servers
MAX_SEQS = 8       # --max-seqs
THREADS = 2        # -t
HTTP_TIMEOUT = 120.0
READY_TIMEOUT = 120.0
INT2_ARGS = ["--kv", "int2-oscar", "--kv-sink", "16", "--kv-recent", "32"]  # + --rotations DIR

# The servers are local: never go through a proxy from the environment.
for _k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_k, None)
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

ARGS: argparse.Namespace
TMP: str = ""
VERBOSE = False


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def note(msg):
    print(f"     note: {msg}", flush=True)


def info(msg):
    if VERBOSE:
        print(f"     {msg}", flush=True)


def short(s, n=300):
    s = s if isinstance(s, str) else repr(s)
    return s if len(s) <= n else s[:n] + f"...({len(s)} chars)"


def first_diff(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


# ---------------------------------------------------------------------------- texts

_TEXT_CACHE: dict[str, str] = {}


def text_of(path: str) -> str:
    if path not in _TEXT_CACHE:
        with open(path, encoding="utf-8", errors="replace") as f:
            _TEXT_CACHE[path] = f.read()
    return _TEXT_CACHE[path]


def prose(frac: float, chars: int) -> str:
    """About `chars` characters of the eval text (the calib text if none) starting near
    fraction `frac` of it, cut at word boundaries. ~4.4 characters per SmolLM2 token."""
    t = text_of(ARGS.eval_text or ARGS.calib_text)
    start = int(len(t) * frac)
    while start < len(t) and not t[start].isspace():
        start += 1
    while start < len(t) and t[start].isspace():
        start += 1
    end = min(len(t), start + chars)
    while end < len(t) and not t[end].isspace():
        end += 1
    return t[start:end]


# ---------------------------------------------------------------------------- servers

def _die_with_parent():
    try:  # PR_SET_PDEATHSIG: the server dies with this script even if it is SIGKILLed
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass


class Server:
    def __init__(self, name: str, extra_args: list[str]):
        self.name = name
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path = ""
        self.exit_code: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cmd(self) -> list[str]:
        return [ARGS.oscar, "serve", "-m", ARGS.model, "--host", "127.0.0.1", "--port", "0",
                "--api-key", API_KEY, "--model-name", MODEL_NAME, "-t", str(THREADS),
                "-c", str(CTX), "--max-seqs", str(MAX_SEQS), "--device", ARGS.device] + self.extra_args

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def tail(self, n=25) -> str:
        lines = self.log_text().splitlines()[-n:]
        return "\n".join(f"       | {l}" for l in lines)

    def start(self):
        fd, self.log_path = tempfile.mkstemp(prefix=f"serve-{self.name}-", suffix=".log", dir=TMP)
        cmd = self.cmd()
        info(f"starting {self.name}: {' '.join(cmd)}")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                     preexec_fn=_die_with_parent)
        os.close(fd)
        deadline = t0 + READY_TIMEOUT
        pat = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
        while True:
            m = pat.search(self.log_text())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise TestFailure(f"server '{self.name}' exited with {self.proc.returncode} before it was ready:\n"
                                  + self.tail())
            if time.monotonic() > deadline:
                raise TestFailure(f"server '{self.name}' printed no 'listening on' line in {READY_TIMEOUT:.0f} s:\n"
                                  + self.tail())
            time.sleep(0.1)
        check(self.port > 0, f"server '{self.name}' reported port {self.port}")
        last = None
        while time.monotonic() < deadline:
            try:
                r = httpx.get(self.url + "/health", timeout=10)
                if r.status_code == 200:
                    break
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as e:
                last = repr(e)
            if self.proc.poll() is not None:
                raise TestFailure(f"server '{self.name}' exited with {self.proc.returncode}:\n" + self.tail())
            time.sleep(0.1)
        else:
            raise TestFailure(f"server '{self.name}': /health not 200 within {READY_TIMEOUT:.0f} s ({last})")
        print(f"     server '{self.name}' ready on port {self.port} in {time.monotonic() - t0:.1f} s", flush=True)
        for line in self.log_text().splitlines():
            if re.search(r"(?i)bytes per token|sequences|kv", line):
                info(f"[{self.name}] {line.strip()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=30.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` s. Returns the exit code, None if it had to be killed."""
        if self.proc is None:
            return self.exit_code
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.exit_code = None
                return None
        self.exit_code = self.proc.returncode
        return self.exit_code

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


SERVERS: dict[str, Server] = {}
START_ERRORS: dict[str, Exception] = {}
USED: list[Server] = []  # servers the current test touched (their log tails go with a failure)
_ROT: dict[str, object] = {}


def rotations() -> str:
    """Calibrates OSCAR rotations once per run: 2000 tokens in 4 prompts, without the clip search
    (which takes minutes on two cores; the reference clips do for a test)."""
    if "err" in _ROT:
        raise TestFailure(f"calibration failed earlier: {_ROT['err']}")
    if "dir" not in _ROT:
        out = os.path.join(TMP, "rot")
        cmd = [ARGS.oscar, "calibrate", "-m", ARGS.model, "-f", ARGS.calib_text, "--tokens", "2000",
               "--prompts", "4", "--no-clip-search", "-o", out, "-t", str(THREADS)]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=600)
        except subprocess.TimeoutExpired:
            _ROT["err"] = "oscar calibrate took over 600 s"
            raise TestFailure(_ROT["err"])
        if p.returncode != 0:
            _ROT["err"] = (f"oscar calibrate exited {p.returncode}: "
                           + p.stderr.decode("utf-8", "replace")[-1500:])
            raise TestFailure(_ROT["err"])
        print(f"     calibrated rotations in {time.monotonic() - t0:.1f} s", flush=True)
        _ROT["dir"] = out
    return _ROT["dir"]


def server_args(name: str) -> list[str]:
    if name == "bf16":
        return ["--kv", "bf16"]
    if name == "int2":
        return INT2_ARGS + ["--rotations", rotations()]
    if name == "tight":  # pages for about two sequences at once, admission by the prompt alone: preemption
        # (16 MiB at -c 512: on the GPU a sequence of -c tokens plus one 64-row forward's pages)
        return ["--kv", "bf16", "--kv-mem", str(16 * CTX // 512), "--output-reserve", "0", "--step-tokens", "64"]
    if name == "capped":  # a small connection cap and short timeouts, for the slow-client tests
        return ["--kv", "bf16", "--max-connections", "64", "--read-timeout", "3", "--request-timeout", "4"]
    raise KeyError(name)


def get_server(name: str) -> Server:
    """The running server of configuration `name`, started on first use."""
    if name in START_ERRORS:
        raise TestFailure(f"server '{name}' could not be started (see the first failure that names it)")
    s = SERVERS.get(name)
    if s is None or not s.alive():
        if s is not None:
            raise TestFailure(f"server '{name}' is no longer running (exit {s.proc.returncode}):\n" + s.tail())
        try:
            s = Server(name, server_args(name))
            SERVERS[name] = s
            s.start()
        except Exception as e:
            START_ERRORS[name] = e
            if s is not None:
                s.kill()
            raise
    if s not in USED:
        USED.append(s)
    return s


def cleanup():
    for s in SERVERS.values():
        s.kill()


atexit.register(cleanup)


def _on_signal(signum, frame):
    cleanup()
    sys.exit(128 + signum)


# ---------------------------------------------------------------------------- HTTP helpers

def auth(key: str | None = API_KEY) -> dict:
    return {"Authorization": f"Bearer {key}"} if key is not None else {}


def new_http() -> httpx.Client:
    return httpx.Client(timeout=HTTP_TIMEOUT, trust_env=False)


def post(srv: Server, path: str, body, key: str | None = API_KEY, client: httpx.Client | None = None):
    c = client or new_http()
    try:
        return c.post(srv.url + path, json=body, headers=auth(key))
    finally:
        if client is None:
            c.close()


def get(srv: Server, path: str, key: str | None = API_KEY):
    with new_http() as c:
        return c.get(srv.url + path, headers=auth(key))


def complete(srv: Server, prompt, max_tokens: int, client: httpx.Client | None = None, **kw):
    """POST /v1/completions, greedy unless kw says otherwise -> (text, finish_reason, usage, json)."""
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    body.update(kw)
    r = post(srv, "/v1/completions", body, client=client)
    check(r.status_code == 200, f"POST /v1/completions -> {r.status_code}: {short(r.text)}")
    j = r.json()
    ch = j["choices"][0]
    return ch["text"], ch["finish_reason"], j["usage"], j


def sse_data(resp: httpx.Response):
    """Yields the payload of each `data:` line of a server-sent-event stream."""
    for line in resp.iter_lines():
        if line.startswith("data:"):
            yield line[5:].lstrip(" ")


def openai_client(srv: Server, key: str = API_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key=key, max_retries=0, timeout=HTTP_TIMEOUT)


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text format -> {name: [(labels, value)]}. Skips comments and blank lines."""
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$')
    label_re = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        if not m:
            raise TestFailure(f"/metrics: cannot parse line {line!r}")
        name, labels_s, value_s = m.groups()
        labels = {}
        if labels_s:
            for lm in label_re.finditer(labels_s):
                labels[lm.group(1)] = (lm.group(2).replace('\\"', '"').replace("\\n", "\n")
                                       .replace("\\\\", "\\"))
        try:
            value = float(value_s)
        except ValueError:
            raise TestFailure(f"/metrics: bad value in line {line!r}")
        out.setdefault(name, []).append((labels, value))
    return out


def metrics(srv: Server) -> dict:
    r = get(srv, "/metrics")
    check(r.status_code == 200, f"GET /metrics -> {r.status_code}: {short(r.text)}")
    return parse_prometheus(r.text)


def metric(m: dict, name: str, **labels) -> float | None:
    """Sum of the samples of `name` whose labels include `labels`; None if there are none."""
    vals = [v for ls, v in m.get(name, []) if all(ls.get(k) == want for k, want in labels.items())]
    return sum(vals) if vals else None


def raw_request(port: int, method: str, path: str, headers: dict, body: bytes = b"", timeout=60.0):
    """A hand-written HTTP/1.1 request that keeps going when the server answers before the
    body is sent (413) and reads the response even after a reset. -> (status or None, headers
    text, body bytes)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    deadline = time.monotonic() + timeout
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        for k, v in headers.items():
            head += f"{k}: {v}\r\n"
        if body or method in ("POST", "PUT"):
            head += f"Content-Length: {len(body)}\r\n"
        data = (head + "\r\n").encode("latin-1") + body
        sent = 0
        try:
            while sent < len(data):
                r, w, _ = select.select([sock], [sock], [], max(0.0, deadline - time.monotonic()))
                if r:
                    break  # the server answered (or closed) before taking the whole request
                if not w:
                    raise TestFailure(f"{method} {path}: timed out sending the request")
                sent += sock.send(data[sent:sent + 65536])
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = b""
        while time.monotonic() < deadline:
            try:
                c = sock.recv(65536)
            except (ConnectionResetError, socket.timeout, TimeoutError):
                break
            if not c:
                break
            buf += c
            if b"\r\n\r\n" in buf:
                hdr, rest = buf.split(b"\r\n\r\n", 1)
                m = re.search(rb"(?im)^content-length:\s*(\d+)", hdr)
                if m and len(rest) >= int(m.group(1)):
                    break
        if not buf.startswith(b"HTTP/"):
            return None, "", buf
        hdr, _, rest = buf.partition(b"\r\n\r\n")
        status = int(hdr.split(b" ", 2)[1])
        return status, hdr.decode("latin-1"), rest
    finally:
        sock.close()


# ---------------------------------------------------------------------------- the reference

_REF: dict = {}


def oscar_run(prompt: str, n: int, kv_args: list[str]):
    """`oscar run` greedy -> (completion text, prompt tokens, generated tokens)."""
    key = (prompt, n, tuple(kv_args))
    if key in _REF:
        return _REF[key]
    fd, path = tempfile.mkstemp(prefix="prompt-", suffix=".txt", dir=TMP)
    with os.fdopen(fd, "wb") as f:
        f.write(prompt.encode("utf-8"))
    cmd = [ARGS.oscar, "run", "-m", ARGS.model, "-f", path, "-n", str(n), "--temp", "0", "--no-display-prompt",
           "-t", str(THREADS), "-c", str(CTX), "--device", ARGS.device] + kv_args
    p = subprocess.run(cmd, capture_output=True, timeout=600)
    err = p.stderr.decode("utf-8", "replace")
    check(p.returncode == 0, f"oscar run exited {p.returncode}: {err[-1500:]}")
    out = p.stdout.decode("utf-8", "replace")
    if out.endswith("\n"):
        out = out[:-1]
    mp = re.search(r"prompt: (\d+) tokens", err)
    mg = re.search(r"generation: (\d+) tokens", err)
    res = (out, int(mp.group(1)) if mp else None, int(mg.group(1)) if mg else None)
    _REF[key] = res
    return res


def compare_with_run(srv: Server, prompts: list[str], kv_args: list[str], n=24, min_prompt_tokens=0):
    problems = []
    for i, p in enumerate(prompts):
        ref, ref_np, ref_ng = oscar_run(p, n, kv_args)
        text, fin, usage, _ = complete(srv, p, n)
        print(f"     prompt {i}: {usage.get('prompt_tokens')} prompt tokens, {usage.get('completion_tokens')} "
              f"generated, finish_reason {fin}; run: {ref_np} prompt tokens, {ref_ng} generated", flush=True)
        if text != ref:
            k = first_diff(text, ref)
            problems.append(f"prompt {i}: server text differs from oscar run at character {k}: "
                            f"server {text!r} vs run {ref!r}")
        if fin not in ("stop", "length"):
            problems.append(f"prompt {i}: finish_reason {fin!r}")
        if ref_np is not None and usage.get("prompt_tokens") != ref_np:
            problems.append(f"prompt {i}: usage.prompt_tokens {usage.get('prompt_tokens')} but oscar run "
                            f"tokenized the prompt into {ref_np}")
        if usage.get("prompt_tokens", 0) < min_prompt_tokens:
            problems.append(f"prompt {i}: only {usage.get('prompt_tokens')} prompt tokens (wanted >= "
                            f"{min_prompt_tokens} so that the INT2 history is used)")
        if ref_ng is not None:
            want = "stop" if ref_ng < n else "length"
            if fin != want:
                problems.append(f"prompt {i}: finish_reason {fin!r} but oscar run generated {ref_ng} of {n} "
                                f"tokens (expected {want!r})")
        if fin == "length" and usage.get("completion_tokens") != n:
            problems.append(f"prompt {i}: finish_reason length but completion_tokens {usage.get('completion_tokens')}"
                            f" != max_tokens {n}")
    check(not problems, "; ".join(problems))


# ---------------------------------------------------------------------------- tests

def check_usage(u, max_tokens, where):
    check(u is not None, f"{where}: no usage")
    pt, ct, tt = u.prompt_tokens, u.completion_tokens, u.total_tokens
    check(pt > 0, f"{where}: usage.prompt_tokens {pt}")
    check(0 < ct <= max_tokens, f"{where}: usage.completion_tokens {ct} not in [1, {max_tokens}]")
    check(tt == pt + ct, f"{where}: usage.total_tokens {tt} != {pt} + {ct}")
    d = getattr(u, "prompt_tokens_details", None)
    check(d is not None and isinstance(getattr(d, "cached_tokens", None), int),
          f"{where}: usage.prompt_tokens_details.cached_tokens missing ({d!r})")
    check(0 <= d.cached_tokens <= pt, f"{where}: cached_tokens {d.cached_tokens} not in [0, {pt}]")


def test_models():
    srv = get_server("bf16")
    with openai_client(srv) as client:
        ids = [m.id for m in client.models.list()]
    check(MODEL_NAME in ids, f"/v1/models (openai client) lists {ids}, not {MODEL_NAME!r}")
    r = get(srv, "/v1/models")
    check(r.status_code == 200, f"GET /v1/models -> {r.status_code}")
    j = r.json()
    check(j.get("object") == "list", f"/v1/models: object {j.get('object')!r}, wanted 'list'")
    check(any(d.get("id") == MODEL_NAME and d.get("object") == "model" for d in j.get("data", [])),
          f"/v1/models: {short(r.text)}")
    # What sglang-router asks a worker before routing to it.
    for route in ("/model_info", "/server_info"):
        r = get(srv, route)
        check(r.status_code == 200 and r.json().get("model_path") == MODEL_NAME, f"GET {route} -> {r.status_code}: "
              f"{short(r.text)}")
    check(get(srv, "/server_info").json().get("context_length") == CTX, "/server_info: context_length is not -c")


def test_openai_nonstreaming():
    srv = get_server("bf16")
    with openai_client(srv) as client:
        openai_nonstreaming(client)


def openai_nonstreaming(client):
    n = 16
    c = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}],
                                       max_tokens=n, temperature=0)
    ch = c.choices[0]
    check(ch.message.role == "assistant", f"chat: role {ch.message.role!r}")
    check(ch.message.content and ch.message.content.strip(), f"chat: empty content {ch.message.content!r}")
    check(ch.finish_reason in ("stop", "length"), f"chat: finish_reason {ch.finish_reason!r}")
    check_usage(c.usage, n, "chat")
    check(c.object == "chat.completion", f"chat: object {c.object!r}")
    info(f"chat: {ch.message.content!r} ({ch.finish_reason})")

    c = client.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=n, temperature=0)
    ch = c.choices[0]
    check(ch.text and ch.text.strip(), f"completion: empty text {ch.text!r}")
    check(ch.finish_reason in ("stop", "length"), f"completion: finish_reason {ch.finish_reason!r}")
    if ch.finish_reason == "length":
        check(c.usage.completion_tokens == n, f"completion: finish_reason length but {c.usage.completion_tokens} tokens")
    check_usage(c.usage, n, "completion")
    check(c.object == "text_completion", f"completion: object {c.object!r}")
    info(f"completion: {ch.text!r} ({ch.finish_reason})")


def test_openai_streaming():
    srv = get_server("bf16")
    with openai_client(srv) as client:
        openai_streaming(client)


def openai_streaming(client):
    n = 16
    problems = []
    # chat: streamed text equals the non-streamed one (greedy), usage arrives in the last chunk.
    msgs = [{"role": "user", "content": "Name three colours."}]
    full = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=n, temperature=0)
    parts, finish, usage, n_chunks = [], None, None, 0
    for chunk in client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=n, temperature=0,
                                                stream=True, stream_options={"include_usage": True}):
        n_chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason is not None:
                finish = ch.finish_reason
    text = "".join(parts)
    if not text.strip():
        problems.append(f"chat stream: empty text after {n_chunks} chunks")
    if text != full.choices[0].message.content:
        problems.append(f"chat stream text {text!r} != non-streamed {full.choices[0].message.content!r}")
    if finish not in ("stop", "length"):
        problems.append(f"chat stream: finish_reason {finish!r}")
    try:
        check_usage(usage, n, "chat stream")
        if usage.completion_tokens != full.usage.completion_tokens:
            problems.append(f"chat stream: completion_tokens {usage.completion_tokens} != non-streamed "
                            f"{full.usage.completion_tokens}")
    except TestFailure as e:
        problems.append(str(e))

    prompt = "Once upon a time"
    full = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=n, temperature=0)
    parts, finish, usage = [], None, None
    for chunk in client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=n, temperature=0,
                                           stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            parts.append(ch.text or "")
            if ch.finish_reason is not None:
                finish = ch.finish_reason
    text = "".join(parts)
    if not text.strip():
        problems.append("completion stream: empty text")
    if text != full.choices[0].text:
        problems.append(f"completion stream text {text!r} != non-streamed {full.choices[0].text!r}")
    if finish not in ("stop", "length"):
        problems.append(f"completion stream: finish_reason {finish!r}")
    try:
        check_usage(usage, n, "completion stream")
    except TestFailure as e:
        problems.append(str(e))

    # Without include_usage a stream still works (and carries no usage).
    texts = []
    for chunk in client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=n, temperature=0,
                                           stream=True):
        texts.extend(ch.text or "" for ch in chunk.choices)
        if chunk.usage is not None:
            note("a stream without stream_options.include_usage carried usage")
    if "".join(texts) != full.choices[0].text:
        problems.append("completion stream without include_usage: different text")
    check(not problems, "; ".join(problems))


def test_sse_done():
    """Raw SSE framing: text/event-stream, every data line JSON, the last one [DONE], for both endpoints."""
    srv = get_server("bf16")
    problems = []
    for path, body in [
        ("/v1/completions", {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 8, "temperature": 0,
                             "stream": True, "stream_options": {"include_usage": True}}),
        ("/v1/chat/completions", {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello"}],
                                  "max_tokens": 8, "temperature": 0, "stream": True}),
    ]:
        with new_http() as c, c.stream("POST", srv.url + path, json=body, headers=auth()) as r:
            if r.status_code != 200:
                problems.append(f"{path}: HTTP {r.status_code}: {short(r.read().decode('utf-8', 'replace'))}")
                continue
            ctype = r.headers.get("content-type", "")
            if not ctype.startswith("text/event-stream"):
                problems.append(f"{path}: content-type {ctype!r}")
            events = list(sse_data(r))
        if not events or events[-1] != "[DONE]":
            problems.append(f"{path}: the stream does not end with 'data: [DONE]' (last: {events[-1:]!r})")
            continue
        if events.count("[DONE]") != 1:
            problems.append(f"{path}: {events.count('[DONE]')} [DONE] events")
        chunks = []
        for e in events[:-1]:
            try:
                chunks.append(json.loads(e))
            except json.JSONDecodeError:
                problems.append(f"{path}: a data line is not JSON: {short(e)}")
        if path == "/v1/completions" and chunks:
            last = chunks[-1]
            if last.get("choices") != [] or not last.get("usage"):
                problems.append(f"{path}: with include_usage the last chunk should have choices [] and usage: "
                                f"{short(json.dumps(last))}")
            u = last.get("usage") or {}
            if not (u.get("prompt_tokens", 0) > 0 and 0 < u.get("completion_tokens", 0) <= 8):
                problems.append(f"{path}: usage {u}")
            if not isinstance((u.get("prompt_tokens_details") or {}).get("cached_tokens"), int):
                problems.append(f"{path}: usage has no prompt_tokens_details.cached_tokens: {u}")
    check(not problems, "; ".join(problems))


def test_sampling_params():
    """seed makes sampling repeatable; top_k 1 is greedy; logprobs come back in OpenAI's shape."""
    srv = get_server("bf16")
    problems = []
    prompt = "In the morning she walked to the village and"
    greedy, _, _, _ = complete(srv, prompt, 16)
    kw = dict(temperature=1.0, top_p=0.95, seed=1234)
    a, _, _, _ = complete(srv, prompt, 16, **kw)
    b, _, _, _ = complete(srv, prompt, 16, **kw)
    if a != b:
        problems.append(f"same seed, different texts: {a!r} vs {b!r}")
    k1, _, _, _ = complete(srv, prompt, 16, temperature=1.0, top_k=1, seed=7)
    if k1 != greedy:
        problems.append(f"top_k 1 at temperature 1 gave {k1!r}, greedy gave {greedy!r}")
    mp, _, _, _ = complete(srv, prompt, 16, temperature=1.0, min_p=1.0, seed=7)
    if mp != greedy:
        problems.append(f"min_p 1 at temperature 1 gave {mp!r}, greedy gave {greedy!r}")
    # stop: the text ends before the stop string, finish_reason stop.
    if len(greedy) > 6:
        stop = greedy[3:6]
        s, fin, _, _ = complete(srv, prompt, 16, stop=[stop])
        if stop in s or fin != "stop" or not greedy.startswith(s):
            problems.append(f"stop {stop!r}: got {s!r} ({fin}), greedy {greedy!r}")
    # logprobs on the chat endpoint (OpenAI's shape).
    with openai_client(srv) as client:
        c = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}], max_tokens=6, temperature=0,
            logprobs=True, top_logprobs=3)
    lp = c.choices[0].logprobs
    if lp is None or not lp.content:
        problems.append(f"chat logprobs: none returned ({lp!r})")
    else:
        if not 0 < len(lp.content) <= 6:
            problems.append(f"chat logprobs: {len(lp.content)} entries for max_tokens 6")
        for i, t in enumerate(lp.content):
            tops = t.top_logprobs or []
            if t.logprob > 1e-6 or len(tops) != 3:
                problems.append(f"chat logprobs[{i}]: logprob {t.logprob}, {len(tops)} top_logprobs (wanted 3)")
                break
            if abs(max(x.logprob for x in tops) - t.logprob) > 1e-3:
                problems.append(f"chat logprobs[{i}]: greedy token's logprob {t.logprob} is not the top "
                                f"{[x.logprob for x in tops]}")
                break
    check(not problems, "; ".join(problems))


def greedy_prompts_bf16():
    return ["The capital of France is", prose(0.31, 1200)]


def greedy_prompts_int2():
    return [prose(0.52, 1200), prose(0.77, 1500), "The capital of France is"]


def test_greedy_matches_run_bf16():
    srv = get_server("bf16")
    compare_with_run(srv, greedy_prompts_bf16(), ["--kv", "bf16"])


def test_greedy_matches_run_int2():
    srv = get_server("int2")
    rot = rotations()
    ps = greedy_prompts_int2()
    compare_with_run(srv, ps[:2], INT2_ARGS + ["--rotations", rot], min_prompt_tokens=200)
    compare_with_run(srv, ps[2:], INT2_ARGS + ["--rotations", rot])


def one_by_one(srv: Server, prompts: list[str], n: int) -> list:
    """Each prompt's (text, finish reason, completion tokens), one request after another."""
    out = []
    with new_http() as c:
        for p in prompts:
            text, fin, usage, _ = complete(srv, p, n, client=c)
            out.append((text, fin, usage.get("completion_tokens")))
    return out


def all_at_once(srv: Server, prompts: list[str], n: int) -> list:
    """The same, all requests sent at once (a thread each, released together); an exception
    in place of a request that failed."""
    results: list = [None] * len(prompts)
    barrier = threading.Barrier(len(prompts))

    def worker(i):
        try:
            with new_http() as c:
                barrier.wait(30)
                text, fin, usage, _ = complete(srv, prompts[i], n, client=c)
                results[i] = (text, fin, usage.get("completion_tokens"))
        except Exception as e:  # noqa: BLE001
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HTTP_TIMEOUT + 60)
    return results


def test_concurrent_equals_sequential():
    srv = get_server("bf16")
    n = 16
    prompts = [prose(0.05 + 0.11 * i, 250 + 90 * i) for i in range(8)]
    seq = one_by_one(srv, prompts, n)
    t0 = time.monotonic()
    results = all_at_once(srv, prompts, n)
    info(f"8 concurrent requests in {time.monotonic() - t0:.1f} s")
    problems = []
    for i, (s, c) in enumerate(zip(seq, results)):
        if isinstance(c, Exception) or c is None:
            problems.append(f"request {i}: {c!r}")
        elif c != s:
            k = first_diff(c[0], s[0])
            problems.append(f"request {i}: concurrent {c!r} != sequential {s!r} (text differs at character {k})")
    check(not problems, "; ".join(problems))


def test_preemption_swaps():
    """More requests than the pages hold, admitted by their prompts: sequences are preempted, their
    pages swapped to host memory and back, and every greedy answer is the one it gives alone."""
    srv = get_server("tight")
    # Short prompts, long answers: all six (or five) are admitted by their prompts, and their
    # answers outgrow what is left, however fast the device runs them.
    n = CTX // 4
    prompts = [prose(0.03 + 0.07 * i, (240 + 20 * i) * CTX // 512) for i in range(6)]
    alone = one_by_one(srv, prompts, n)
    m0 = metrics(srv)
    results = all_at_once(srv, prompts, n)
    m1 = metrics(srv)
    delta = lambda name, **kw: (metric(m1, name, **kw) or 0) - (metric(m0, name, **kw) or 0)  # noqa: E731
    preemptions, held = delta("oscar_preemptions_total"), delta("oscar_preempted_tokens_total")
    swapped = delta("oscar_resumed_tokens_total", source="swapped")
    info(f"{preemptions:.0f} preemptions, {held:.0f} tokens held, {swapped:.0f} restored from the swap space, "
         f"{delta('oscar_resumed_tokens_total', source='recomputed'):.0f} recomputed")
    check(preemptions > 0, "no request was preempted: the test's pages are too many for it")
    check(swapped == held, f"{held:.0f} preempted tokens but {swapped:.0f} restored from the swap space")
    check(metric(m1, "oscar_kv_swap_bytes", what="used") == 0, "the swap space still holds bytes after the run")
    # The CPU's products give a request the same bits alone and in any batch, so the whole
    # answer must match. The GPU's agree only to rounding (cuBLAS picks kernels by the batch's
    # shape; docs/server.md), and the random model's repetitive answers are full of near-ties:
    # there the first 64 characters must match (concurrent_equals_sequential's 16 tokens).
    def same(r, a):
        return r == a if ARGS.device != "cuda" else r[0][:64] == a[0][:64]

    problems = []
    for i, (a, r) in enumerate(zip(alone, results)):
        if isinstance(r, Exception) or r is None:
            problems.append(f"request {i}: {r!r}")
        elif not same(r, a):
            problems.append(f"request {i}: under preemption {short(r[0], 120)!r} != alone {short(a[0], 120)!r} "
                            f"(differs at character {first_diff(r[0], a[0])})")
    check(not problems, "; ".join(problems))


def kv_state(srv: Server):
    m = metrics(srv)
    return (metric(m, "oscar_requests_running"), metric(m, "oscar_requests_waiting"),
            metric(m, "oscar_kv_pages_used"), metric(m, "oscar_generation_tokens_total"), m)


def test_disconnect_frees_pages():
    srv = get_server("bf16")
    running0, waiting0, pages0, gen0, _ = kv_state(srv)
    check(running0 is not None and pages0 is not None,
          "/metrics lacks oscar_requests_running or oscar_kv_pages_used")
    info(f"before: running {running0}, waiting {waiting0}, pages used {pages0}, generated {gen0}")
    max_tokens = CTX - 64
    body = {"model": MODEL_NAME, "prompt": prose(0.4, 200), "max_tokens": max_tokens, "temperature": 0,
            "stream": True}
    got = 0
    c = new_http()
    try:
        with c.stream("POST", srv.url + "/v1/completions", json=body, headers=auth()) as r:
            check(r.status_code == 200, f"HTTP {r.status_code}")
            for data in sse_data(r):
                if data == "[DONE]":
                    break
                got += 1
                if got >= 3:
                    break
    finally:
        c.close()  # drops the connection mid-stream
    check(got >= 3, f"the stream ended after {got} events (wanted at least 3 before disconnecting)")
    deadline = time.monotonic() + 10
    while True:
        running, waiting, pages, gen, m = kv_state(srv)
        if running == 0 and (pages or 0) == 0:
            break
        if time.monotonic() > deadline:
            used = {ls.get("segment", "?"): v for ls, v in m.get("oscar_kv_pages_used", [])}
            raise TestFailure(f"10 s after the disconnect: oscar_requests_running {running}, oscar_kv_pages_used "
                              f"{used} (sum {pages}; {pages0} before the request)")
        time.sleep(0.2)
    if gen is not None and gen0 is not None:
        check(gen - gen0 < max_tokens, f"the server generated all {gen - gen0} tokens of the disconnected stream")
        info(f"generated {gen - gen0} tokens of the disconnected stream's {max_tokens}")
    text, fin, _, _ = complete(srv, "Hello", 4)
    check(fin in ("stop", "length"), f"the request after the disconnect: finish_reason {fin!r}")


def test_nonstreaming_disconnect():
    """A non-streaming request whose client leaves is cancelled, as a stream is."""
    srv = get_server("bf16")
    running0, _, pages0, gen0, _ = kv_state(srv)
    max_tokens = CTX - 64
    body = json.dumps({"model": MODEL_NAME, "prompt": prose(0.45, 200), "max_tokens": max_tokens,
                       "temperature": 0}).encode()
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                 f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    deadline = time.monotonic() + 10
    while True:  # until it runs
        running, _, _, gen, _ = kv_state(srv)
        if running and running > (running0 or 0) and gen is not None and gen > (gen0 or 0):
            break
        check(time.monotonic() < deadline, "the request did not start within 10 s")
        time.sleep(0.05)
    sock.close()
    t0 = time.monotonic()
    while True:
        running, _, pages, gen, _ = kv_state(srv)
        if running == (running0 or 0) and (pages or 0) == (pages0 or 0):
            break
        check(time.monotonic() - t0 < 5, f"5 s after the client left: running {running}, pages {pages}")
        time.sleep(0.05)
    dt = time.monotonic() - t0
    info(f"cancelled {dt:.2f} s after the client left, after {gen - gen0} of {max_tokens} tokens")
    check(gen - gen0 < max_tokens, "the server generated every token of the abandoned request")
    check(dt < 2.0, f"the abandoned request ran {dt:.2f} s after the client left")


def stall(port: int, n: int) -> list:
    """n connections that each send a request's headers and one byte of its body, then wait."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{")
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket, wait: float) -> bool:
    s.settimeout(wait)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True  # EOF (perhaps after a 408/400 answer)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except (socket.timeout, TimeoutError):
        return False


def check_still_serving(srv: Server) -> tuple[float, float]:
    """/health and a 4-token completion from a fresh client each answer within 2 s; their seconds."""
    c = new_http()
    t = time.monotonic()
    r = c.get(srv.url + "/health", timeout=10)
    health = time.monotonic() - t
    t = time.monotonic()
    _, fin, _, _ = complete(srv, "The capital of France is", 4, client=c)
    comp = time.monotonic() - t
    c.close()
    check(r.status_code == 200 and health < 2.0, f"/health took {health:.2f} s (HTTP {r.status_code})")
    check(fin in ("stop", "length") and comp < 2.0, f"the completion took {comp:.2f} s ({fin})")
    return health, comp


def test_slow_clients():
    """1000 stalled connections: /health and a completion from another client still answer
    within 2 s, and the stalled ones are closed after the read timeout."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    srv = get_server("bf16")
    complete(srv, "Hello", 2)  # warm
    t0 = time.monotonic()
    socks = stall(srv.port, 1000)
    info(f"1000 stalled connections opened in {time.monotonic() - t0:.1f} s")
    try:
        health, comp = check_still_serving(srv)
        info(f"/health {health * 1000:.0f} ms, a 4-token completion {comp * 1000:.0f} ms")
        # The default read timeout is 5 s: every stalled connection is answered 408 and closed then.
        t = time.monotonic()
        alive = sum(1 for s in socks if not closed_by_server(s, max(0.01, 9 - (time.monotonic() - t))))
        info(f"{1000 - alive} of 1000 stalled connections closed by the server within {time.monotonic() - t:.1f} s")
        check(alive == 0, f"{alive} stalled connections still open 9 s later")
    finally:
        for s in socks:
            s.close()


def test_trickling_clients():
    """48 connections that each send a request a byte a second, never silent for the read
    timeout (3 s here): /health and a completion still answer within 2 s, and the server
    closes them all at the request timeout (4 s here), not when their requests end (2 min)."""
    srv = get_server("capped")
    complete(srv, "Hello", 2)  # warm
    body = b'{"model": "m", "prompt": "' + b"x" * 60 + b'", "max_tokens": 1}'
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(48)]
    t0 = time.monotonic()
    closed_at = {}
    health = comp = None
    try:
        for i in range(len(request)):
            if len(closed_at) == len(socks) or time.monotonic() - t0 > 10:
                break
            for k, s in enumerate(socks):
                if k in closed_at:
                    continue
                try:
                    s.sendall(request[i:i + 1])
                except OSError:
                    closed_at[k] = time.monotonic() - t0
                    continue
                s.setblocking(False)
                try:
                    while True:
                        data = s.recv(4096)
                        if not data:
                            closed_at[k] = time.monotonic() - t0
                            break
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    closed_at[k] = time.monotonic() - t0
                s.setblocking(True)
            if i == 2:  # while they trickle
                health, comp = check_still_serving(srv)
            time.sleep(max(0.0, (i + 1) - (time.monotonic() - t0)))
    finally:
        for s in socks:
            s.close()
    times = sorted(closed_at.values())
    info(f"/health {health * 1000:.0f} ms and a completion {comp * 1000:.0f} ms while they trickled; "
         f"{len(times)} of {len(socks)} closed by the server, from {times[0]:.1f} to {times[-1]:.1f} s"
         if times and health is not None else f"{len(times)} of {len(socks)} closed")
    check(len(times) == len(socks), f"{len(socks) - len(times)} trickling connections still open after 10 s")
    check(times and times[0] > 3.0, f"a trickling connection was closed at {times[0] if times else 0:.1f} s, "
                                    "before the 4-s request timeout")


def test_connection_cap():
    """Over --max-connections (64 here, all held by stalled clients) a request is answered
    503 with Retry-After at once, and served again once they are gone."""
    srv = get_server("capped")
    socks = stall(srv.port, 64)
    try:
        time.sleep(0.3)
        c = new_http()
        t = time.monotonic()
        r = c.post(srv.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 2},
                   headers=auth(), timeout=10)
        dt = time.monotonic() - t
        info(f"over the cap: HTTP {r.status_code} in {dt * 1000:.0f} ms, Retry-After {r.headers.get('retry-after')!r}")
        check(r.status_code == 503 and r.headers.get("retry-after") == "1" and dt < 2.0,
              f"over the cap: HTTP {r.status_code}, Retry-After {r.headers.get('retry-after')!r}, {dt:.2f} s")
        check("error" in r.json(), f"the 503 body is not an error object: {r.text[:200]!r}")
        c.close()
    finally:
        for s in socks:
            s.close()
    time.sleep(0.5)
    text, fin, _, _ = complete(srv, "Hello", 2)
    check(fin in ("stop", "length"), f"after the stalled clients left: finish_reason {fin!r}")


def prefix_cache_check(srv: Server):
    prompt = prose(0.63, 1500)
    m0 = metrics(srv)
    a, fa, ua, _ = complete(srv, prompt, 16)
    b, fb, ub, _ = complete(srv, prompt, 16)
    m1 = metrics(srv)
    ca = (ua.get("prompt_tokens_details") or {}).get("cached_tokens")
    cb = (ub.get("prompt_tokens_details") or {}).get("cached_tokens")
    q = [metric(m, "oscar_prefix_cache_queries_total") for m in (m0, m1)]
    h = [metric(m, "oscar_prefix_cache_hits_total") for m in (m0, m1)]
    print(f"     {ua.get('prompt_tokens')} prompt tokens; cached_tokens first {ca}, second {cb}; prefix cache "
          f"queries {q[0]} -> {q[1]}, hits {h[0]} -> {h[1]}", flush=True)
    check(a == b, f"the same prompt twice gave {a!r} then {b!r}")
    check((fa, ua.get("completion_tokens")) == (fb, ub.get("completion_tokens")),
          f"finish/completion_tokens differ: {fa}/{ua.get('completion_tokens')} vs {fb}/{ub.get('completion_tokens')}")
    for which, cached, u in (("first", ca, ua), ("second", cb, ub)):
        check(isinstance(cached, int) and 0 <= cached <= u.get("prompt_tokens", 0),
              f"{which}: cached_tokens {cached!r} (prompt_tokens {u.get('prompt_tokens')})")
    # The second request must be a hit (whole pages, at least one token left to compute),
    # and equal to the miss above, on the CPU and the GPU alike.
    check("prefix cache: on" in srv.log_text(), "the server did not turn its prefix cache on")
    pt = ub.get("prompt_tokens", 0)
    check(isinstance(cb, int) and cb >= pt - 16 and cb % 16 == 0,
          f"second request: cached_tokens {cb!r}, wanted the prompt's whole pages (prompt_tokens {pt})")
    check(None not in q + h and h[1] - h[0] >= cb // 16, f"prefix cache hits {h} / queries {q} do not show the hit")


def test_prefix_cache_bf16():
    prefix_cache_check(get_server("bf16"))


def test_prefix_cache_int2():
    prefix_cache_check(get_server("int2"))


def error_of(r: httpx.Response):
    try:
        j = r.json()
    except (json.JSONDecodeError, ValueError):
        return None
    e = j.get("error") if isinstance(j, dict) else None
    return e if isinstance(e, dict) else None


def test_bad_requests():
    srv = get_server("bf16")
    problems = []
    chat = "/v1/chat/completions"
    comp = "/v1/completions"
    msgs = [{"role": "user", "content": "hi"}]

    def expect(name, r_or_tuple, status, param=None, contains=(), json_error=True, alt_status=None):
        if isinstance(r_or_tuple, tuple):
            got, body_text = r_or_tuple
            err = None
            try:
                j = json.loads(body_text)
                err = j.get("error") if isinstance(j, dict) and isinstance(j.get("error"), dict) else None
            except (json.JSONDecodeError, ValueError):
                pass
        else:
            got, body_text, err = r_or_tuple.status_code, r_or_tuple.text, error_of(r_or_tuple)
        if got != status:
            if alt_status is not None and got == alt_status:
                note(f"{name}: HTTP {got} (accepted; the contract asks for {status})")
            else:
                problems.append(f"{name}: HTTP {got}, wanted {status} ({short(body_text, 200)})")
                return
        info(f"{name}: HTTP {got} {short(body_text, 200)}")
        if json_error:
            if err is None or not isinstance(err.get("message"), str) or "type" not in err:
                problems.append(f"{name}: body is not {{\"error\": {{message, type, param, code}}}}: "
                                f"{short(body_text, 200)}")
                return
            if not all(k in err for k in ("param", "code")):
                problems.append(f"{name}: error lacks 'param' or 'code': {short(body_text, 200)}")
            if param is not None and err.get("param") != param:
                problems.append(f"{name}: error.param {err.get('param')!r}, wanted {param!r}")
            for s in contains:
                if s not in err.get("message", ""):
                    problems.append(f"{name}: error.message {err.get('message')!r} does not mention {s!r}")
        elif err is None:
            note(f"{name}: the {got} body is not the JSON error object ({short(body_text, 120)!r})")

    with new_http() as c:
        def p(path, body, key=API_KEY):
            return c.post(srv.url + path, json=body, headers=auth(key))

        r = c.post(srv.url + chat, content=b'{"model": "m", "messages": [', headers={
            **auth(), "Content-Type": "application/json"})
        expect("malformed JSON", r, 400)
        r = c.post(srv.url + comp, content=b"[1, 2, 3]", headers={**auth(), "Content-Type": "application/json"})
        expect("JSON array body", r, 400)
        expect("max_tokens 'ten'", p(comp, {"model": MODEL_NAME, "prompt": "hi", "max_tokens": "ten"}), 400,
               "max_tokens")
        expect("temperature 'hot'", p(chat, {"model": MODEL_NAME, "messages": msgs, "temperature": "hot"}), 400,
               "temperature")
        expect("messages 'hi'", p(chat, {"model": MODEL_NAME, "messages": "hi"}), 400, "messages")
        expect("no messages", p(chat, {"model": MODEL_NAME, "max_tokens": 4}), 400, "messages")
        expect("no prompt", p(comp, {"model": MODEL_NAME, "max_tokens": 4}), 400, "prompt")
        expect("max_tokens -5", p(chat, {"model": MODEL_NAME, "messages": msgs, "max_tokens": -5}), 400,
               "max_tokens")
        expect("max_tokens 10**12", p(comp, {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 10**12}), 400,
               "max_tokens")
        expect("n 2", p(chat, {"model": MODEL_NAME, "messages": msgs, "max_tokens": 4, "n": 2}), 400, "n")
        # A prompt longer than the context: the message names both numbers.
        n_ids = CTX + 88
        expect("prompt of token ids longer than -c",
               p(comp, {"model": MODEL_NAME, "prompt": [100] * n_ids, "max_tokens": 4}), 400,
               contains=(str(n_ids), str(CTX)))
        long_text = prose(0.2, CTX * 10)  # ~2x the context in tokens
        r = p(comp, {"model": MODEL_NAME, "prompt": long_text, "max_tokens": 4})
        expect("text prompt longer than -c", r, 400, contains=(str(CTX),))
        e = error_of(r)
        if r.status_code == 400 and e and not any(int(x) > CTX for x in re.findall(r"\d+", e.get("message", ""))):
            problems.append(f"text prompt longer than -c: no token count above {CTX} in {e.get('message')!r}")
        r = p(chat, {"model": MODEL_NAME, "messages": [{"role": "user", "content": long_text}], "max_tokens": 4})
        expect("chat messages longer than -c", r, 400, contains=(str(CTX),))
        # Authentication.
        expect("wrong API key", p(comp, {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 4}, key="wrong"), 401)
        expect("missing API key (completions)", p(comp, {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 4},
                                                  key=None), 401)
        expect("missing API key (/v1/models)", c.get(srv.url + "/v1/models"), 401)
        expect("missing API key (/metrics)", c.get(srv.url + "/metrics"), 401)
        r = c.get(srv.url + "/health")
        if r.status_code != 200:
            problems.append(f"/health without a key: HTTP {r.status_code}")
        with openai_client(srv, key="wrong") as bad:
            try:
                bad.models.list()
                problems.append("openai client with a wrong key: no AuthenticationError")
            except openai.AuthenticationError:
                pass
        # Unknown path.
        expect("unknown path", c.get(srv.url + "/v1/nonexistent", headers=auth()), 404, json_error=False)
    # Size limits, through a hand-written request (the server may answer before reading the body).
    big = json.dumps({"model": MODEL_NAME, "prompt": "a " * (9 * 1024 * 1024 // 2), "max_tokens": 1}).encode()
    try:
        st, _, b = raw_request(srv.port, "POST", comp, {**auth(), "Content-Type": "application/json"}, big)
        if st is None:
            problems.append(f"9 MiB body: the connection closed without a response ({b[:80]!r})")
        else:
            expect("9 MiB body", (st, b.decode("utf-8", "replace")), 413, json_error=False)
    except (OSError, TestFailure) as e:
        problems.append(f"9 MiB body: {e!r}")
    try:
        st, _, b = raw_request(srv.port, "GET", "/v1/models", {**auth(), "X-Padding": "p" * (16 * 1024)})
        if st is None:
            problems.append(f"16 KiB header: the connection closed without a response ({b[:80]!r})")
        else:
            expect("16 KiB header", (st, b.decode("utf-8", "replace")), 431, json_error=False, alt_status=400)
    except (OSError, TestFailure) as e:
        problems.append(f"16 KiB header: {e!r}")
    try:  # each line under 8 KiB (cpp-httplib's per-line limit), the block over it
        pad = {f"X-Padding-{i}": "p" * 4000 for i in range(3)}
        st, _, b = raw_request(srv.port, "GET", "/v1/models", {**auth(), **pad})
        if st is None:
            problems.append(f"12 KiB header block: the connection closed without a response ({b[:80]!r})")
        else:
            expect("12 KiB header block (3 lines of 4 KB)", (st, b.decode("utf-8", "replace")), 431,
                   json_error=False, alt_status=400)
    except (OSError, TestFailure) as e:
        problems.append(f"12 KiB header block: {e!r}")
    # Still serving.
    try:
        text, fin, _, _ = complete(srv, "The capital of France is", 4)
        if fin not in ("stop", "length"):
            problems.append(f"the request after the bad ones: finish_reason {fin!r}")
        r = get(srv, "/health", key=None)
        if r.status_code != 200:
            problems.append(f"/health after the bad requests: HTTP {r.status_code}")
    except (TestFailure, httpx.HTTPError) as e:
        problems.append(f"after the bad requests the server no longer serves: {e}")
    check(srv.alive(), f"the server exited ({srv.proc.returncode})")
    check(not problems, "; ".join(problems))


def test_metrics():
    srv = get_server("bf16")
    m = metrics(srv)
    problems = []
    names = ["oscar_requests_total", "oscar_prompt_tokens_total", "oscar_generation_tokens_total",
             "oscar_requests_waiting", "oscar_requests_running", "oscar_preemptions_total", "oscar_kv_pages_used",
             "oscar_kv_bytes_used", "oscar_kv_pages_free", "oscar_kv_bytes_free", "oscar_prefix_cache_queries_total",
             "oscar_prefix_cache_hits_total"]
    missing = [n for n in names if n not in m]
    if missing:
        problems.append(f"missing metrics: {missing}")
    for name, label, values in [("oscar_kv_pages_used", "segment", ("sink", "history", "recent")),
                                ("oscar_kv_bytes_used", "segment", ("sink", "history", "recent")),
                                ("oscar_kv_pages_free", "pool", ("fp", "history")),
                                ("oscar_kv_bytes_free", "pool", ("fp", "history"))]:
        have = {ls.get(label) for ls, _ in m.get(name, [])}
        if name in m and not have.issuperset(values):
            note(f"{name} has {label} labels {sorted(x for x in have if x)}, the contract names {list(values)}")
    for name, labels, cond in [("oscar_requests_total", {"status": "200"}, "> 0"),
                               ("oscar_requests_total", {"status": "400"}, "> 0"),
                               ("oscar_prompt_tokens_total", {}, "> 0"),
                               ("oscar_generation_tokens_total", {}, "> 0"),
                               ("oscar_kv_pages_free", {}, "> 0"),
                               ("oscar_requests_running", {}, "== 0"),
                               ("oscar_requests_waiting", {}, "== 0")]:
        v = metric(m, name, **labels)
        if v is None or not eval(f"{v} {cond}"):  # noqa: S307 (fixed strings above)
            lab = "{" + ",".join(f'{k}="{x}"' for k, x in labels.items()) + "}" if labels else ""
            problems.append(f"{name}{lab} = {v}, wanted {cond}")
    v401 = metric(m, "oscar_requests_total", status="401")
    info(f"requests_total: {[(ls, v) for ls, v in m.get('oscar_requests_total', [])]}")
    if v401 is None:
        note("oscar_requests_total has no status=\"401\" sample after the unauthenticated requests")
    check(not problems, "; ".join(problems))


def test_sigterm():
    """SIGTERM with a stream running: the stream ends, the process exits 0 within 30 s.
    Also an idle server (int2, if it was started) exits 0 on SIGTERM."""
    problems = []
    other = [s for n, s in SERVERS.items() if n != "bf16" and s.alive()]
    srv = get_server("bf16")
    for s in other:
        rc = s.stop(30)
        if rc != 0:
            problems.append(f"idle server '{s.name}': exit {rc} after SIGTERM (None: killed after 30 s)")
    events, ended, err = [], threading.Event(), []
    started = threading.Event()

    def reader():
        try:
            with new_http() as c:
                # Short enough that a server which finishes running streams on SIGTERM can do so in 30 s.
                body = {"model": MODEL_NAME, "prompt": prose(0.9, 200), "max_tokens": 96, "temperature": 0,
                        "stream": True}
                with c.stream("POST", srv.url + "/v1/completions", json=body, headers=auth()) as r:
                    for d in sse_data(r):
                        events.append(d)
                        started.set()
        except Exception as e:  # noqa: BLE001 (a cut stream is acceptable here)
            err.append(e)
        finally:
            started.set()
            ended.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    if not started.wait(60):
        problems.append("the stream produced no event in 60 s")
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    try:
        rc = srv.proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = "still running"
    dt = time.monotonic() - t0
    if not ended.wait(10):
        problems.append("the client stream did not end after the server stopped")
    print(f"     exit {rc} {dt:.1f} s after SIGTERM; the stream got {len(events)} events, last "
          f"{short(events[-1], 80) if events else None}{', then ' + repr(err[0]) if err else ''}", flush=True)
    if rc != 0:
        problems.append(f"exit code {rc} after SIGTERM, wanted 0")
        if rc == "still running":
            srv.kill()
    else:
        srv.exit_code = 0
    check(not problems, "; ".join(problems))


TESTS = [
    test_models,
    test_openai_nonstreaming,
    test_openai_streaming,
    test_sse_done,
    test_sampling_params,
    test_greedy_matches_run_bf16,
    test_concurrent_equals_sequential,
    test_preemption_swaps,
    test_disconnect_frees_pages,
    test_nonstreaming_disconnect,
    test_slow_clients,
    test_trickling_clients,
    test_connection_cap,
    test_prefix_cache_bf16,
    test_bad_requests,
    test_metrics,
    test_greedy_matches_run_int2,
    test_prefix_cache_int2,
    test_sigterm,  # last: it stops the servers
]


def main() -> int:
    global ARGS, TMP, VERBOSE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oscar", required=True, help="path to the oscar binary")
    ap.add_argument("--model", required=True, help="model file (GGUF)")
    ap.add_argument("--calib-text", required=True, help="text to calibrate the OSCAR rotations on")
    ap.add_argument("--eval-text", default=os.environ.get("OSCAR_EVAL_TEXT", ""),
                    help="text the prompts are cut from (default $OSCAR_EVAL_TEXT, else the calib text)")
    ap.add_argument("--only", default="", help="comma-separated test names (with or without test_)")
    ap.add_argument("--ctx", type=int, default=512,
                    help="-c of the servers and the reference runs (prompts are cut by characters: a model "
                         "whose tokenizer makes more tokens of the same text needs more)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where `oscar serve` and the reference `oscar run` compute (cuda: the GPU backend)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ARGS = ap.parse_args()
    VERBOSE = ARGS.verbose
    global CTX
    CTX = ARGS.ctx
    ARGS.oscar = os.path.abspath(ARGS.oscar)
    if ARGS.eval_text and not os.path.isfile(ARGS.eval_text):
        ARGS.eval_text = ""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    tmp = tempfile.TemporaryDirectory(prefix="oscar-serve-test-")
    TMP = tmp.name
    tests = TESTS
    if ARGS.only:
        want = {w if w.startswith("test_") else "test_" + w for w in ARGS.only.split(",") if w}
        unknown = want - {t.__name__ for t in TESTS}
        if unknown:
            print(f"unknown tests: {sorted(unknown)}")
            return 2
        tests = [t for t in TESTS if t.__name__ in want]
    passed = failed = 0
    t_all = time.monotonic()
    try:
        for t in tests:
            name = t.__name__[len("test_"):]
            USED.clear()
            t0 = time.monotonic()
            try:
                t()
                passed += 1
                print(f"ok   {name} ({time.monotonic() - t0:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001: report and go on
                failed += 1
                reason = str(e) if isinstance(e, TestFailure) else f"{type(e).__name__}: {e}"
                print(f"FAIL {name}: {reason}", flush=True)
                if not isinstance(e, TestFailure):
                    print("".join("       " + l for l in traceback.format_exc().splitlines(True)[-8:]), end="")
                for s in USED:
                    if s.log_path:
                        print(f"     server '{s.name}' log tail ({s.log_path}):\n{s.tail()}", flush=True)
    finally:
        for s in SERVERS.values():
            if s.alive():
                s.stop(30)
        cleanup()
        tmp.cleanup()
    print(f"(took {time.monotonic() - t_all:.0f} s)")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
