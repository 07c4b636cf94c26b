#!/usr/bin/env python3
"""CPU peer benchmark: oscar against llama.cpp (llama-cpp-python) on one GGUF, one machine, one run.

Run by bench/cpu_peer.sh (which installs the peer, prepares rotations and bounds the whole run);
run in the project venv ($OSCAR_VENV), where llama_cpp is installed.

  cpu_peer.py drive ...         the driver: measures every (engine, KV) configuration, writes the
                                JSON and prints the markdown table
  cpu_peer.py llama-worker ...  one llama.cpp measurement group in a fresh process (internal)

Measurement groups ("plans"), the same on both engines, each in a fresh process from an empty cache:
  short     prompt of 16 tokens, then n_short decode steps   -> decode_short
            and (fresh cache) prompt of 512, then n_short      -> prefill_512 (+ decode_after_512)
  depth D   prompt of D tokens, then n_long decode steps       -> decode_after_D (+ prefill_D)
Model load is never timed. oscar: `oscar bench -t 2 -p 16,512 -n N` / `-p D -n N` (its prefill timer
covers one forward over the prompt; its decode timer N single-token forwards). llama.cpp:
Llama.eval over the prompt (n_batch 512), then N Llama.eval([t]) steps, t the greedy (argmax) token.
Each group is run `reps` times; the engines and KV modes are interleaved (every configuration once per
repetition, order rotated between repetitions) and the median is kept.

Prompt tokens: llama.cpp gets the model's own tokenization of $OSCAR_EVAL_TEXT (first N tokens).
`oscar bench` only takes synthetic prompts (N uniformly random token ids, and random ids fed during
decode): the lengths match, the ids differ; neither engine's speed depends on the ids (dense models,
no early stop). As a check on that, `oscar run` is also timed once per KV mode on the same text
(the memory run below), and its own prompt/generation speeds are reported beside the bench rows.

Memory: every subprocess's peak RSS (/usr/bin/time -v when installed, else wait4's rusage). The
memory target is read from one `oscar run -c CTX` per KV mode on the eval text (CTX 4096): peak RSS
against the model file size plus the KV bytes that `oscar run` reports.
"""
import argparse
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HOME = os.path.expanduser("~")
GGML_TYPE = {"f16": 1, "q8_0": 8}  # llama_cpp.GGML_TYPE_F16 / GGML_TYPE_Q8_0
KV_BYTES_PER_ELT = {"f16": 2.0, "q8_0": 34 / 32}  # q8_0: 32 int8 + one f16 scale per block


def tilde(s):
    return s.replace(HOME, "~") if isinstance(s, str) else s


# ----------------------------------------------------------------------------- tokens from the text

def text_tokens(llm, text_path, n):
    """The first n tokens of the text, as the model's own tokenizer splits it (BOS if the model adds one)."""
    raw = open(text_path, "rb").read()
    chars = n * 8 + 4096
    while True:
        toks = llm.tokenize(raw[:chars], add_bos=True, special=False)
        if len(toks) > n + 8 or chars >= len(raw):
            break
        chars *= 2
    if len(toks) < n:
        sys.exit(f"cpu_peer.py: {text_path} gives only {len(toks)} tokens, {n} wanted")
    return toks[:n]


# ----------------------------------------------------------------------------- llama.cpp worker

def llama_worker(a):
    import numpy as np
    import llama_cpp

    plan = json.loads(a.plan)  # [[prompt_tokens, n_gen], ...]
    t_load = time.perf_counter()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=a.n_ctx, n_batch=512, n_ubatch=512, n_threads=a.threads,
                          n_threads_batch=a.threads, flash_attn=True, type_k=GGML_TYPE[a.kv],
                          type_v=GGML_TYPE[a.kv], logits_all=False, verbose=False)
    load_s = time.perf_counter() - t_load
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()
    longest = max(p for p, _ in plan)
    toks = text_tokens(llm, a.text, longest)

    def greedy():
        ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))

    out = []
    for p, n in plan:
        llm.reset()  # n_tokens = 0: the next eval removes every cached position first
        llama_cpp.llama_perf_context_reset(ctx)
        t0 = time.perf_counter()
        llm.eval(toks[:p])
        llama_cpp.llama_synchronize(ctx)
        prefill_s = time.perf_counter() - t0
        perf_p = llama_cpp.llama_perf_context(ctx)
        tok = greedy()
        llama_cpp.llama_perf_context_reset(ctx)
        t0 = time.perf_counter()
        for _ in range(n):
            llm.eval([tok])
            tok = greedy()
        decode_s = time.perf_counter() - t0
        perf_d = llama_cpp.llama_perf_context(ctx)
        out.append({"prompt_tokens": p, "n_gen": n, "prefill_tokens_per_s": p / prefill_s,
                    "decode_tokens_per_s": (n / decode_s) if n else None,
                    "internal_prefill_tokens_per_s": (perf_p.n_p_eval / perf_p.t_p_eval_ms * 1e3)
                    if perf_p.t_p_eval_ms > 0 else None,
                    "internal_decode_tokens_per_s": (perf_d.n_eval / perf_d.t_eval_ms * 1e3)
                    if perf_d.t_eval_ms > 0 else None})
    md = llm.metadata
    arch = md.get("general.architecture", "llama")
    n_layer = int(md.get(f"{arch}.block_count", 0))
    n_head = int(md.get(f"{arch}.attention.head_count", 1))
    n_head_kv = int(md.get(f"{arch}.attention.head_count_kv", n_head))
    n_embd = int(md.get(f"{arch}.embedding_length", 0))
    k_len = int(md.get(f"{arch}.attention.key_length", n_embd // max(n_head, 1)))
    v_len = int(md.get(f"{arch}.attention.value_length", k_len))
    n_ctx = llm.n_ctx()
    kv_bytes = int(n_layer * n_ctx * n_head_kv * (k_len + v_len) * KV_BYTES_PER_ELT[a.kv])
    json.dump({"groups": out, "load_s": load_s, "n_ctx": n_ctx, "kv_bytes_allocated": kv_bytes,
               "kv_bytes_per_token": kv_bytes / n_ctx, "n_vocab": n_vocab,
               "system_info": llama_cpp.llama_print_system_info().decode().strip()}, open(a.out, "w"))


# ----------------------------------------------------------------------------- subprocesses

TIME_BIN = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


class StepFailed(Exception):
    pass


def cpu_busy_s():
    """Busy CPU seconds of the whole machine so far (all cores), from /proc/stat."""
    f = open("/proc/stat").readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


LAST_FOREIGN = {}


def run_measured(cmd, timeout_s, log_path):
    """Runs cmd (its own process group) with a timeout; returns (stdout+stderr text, peak RSS KiB).
    Sets LAST_FOREIGN["share"]: the CPU time other processes took during the run, as a share of the
    machine (all cores over the run's wall time): a noise flag for a shared machine."""
    if timeout_s < 5:
        raise StepFailed("not run: out of time")
    tfile = None
    full = list(cmd)
    if TIME_BIN:
        fd, tfile = tempfile.mkstemp(prefix="cpu_peer_time.")
        os.close(fd)
        full = [TIME_BIN, "-v", "-o", tfile] + full
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        busy0, wall0 = cpu_busy_s(), time.monotonic()
        p = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        status, ru = None, None
        try:
            while True:
                pid, st, r = os.wait4(p.pid, os.WNOHANG)
                if pid == p.pid:
                    status, ru = st, r
                    p.returncode = os.waitstatus_to_exitcode(st)
                    wall = time.monotonic() - wall0
                    foreign = cpu_busy_s() - busy0 - (r.ru_utime + r.ru_stime)
                    LAST_FOREIGN["share"] = max(0.0, foreign) / (wall * os.cpu_count()) if wall > 0 else None
                    break
                if time.monotonic() > deadline:
                    os.killpg(p.pid, signal.SIGKILL)
                    _, st, _ = os.wait4(p.pid, 0)
                    p.returncode = os.waitstatus_to_exitcode(st)
                    raise StepFailed(f"timed out after {timeout_s:.0f} s (log {tilde(log_path)})")
                time.sleep(0.05)
        except BaseException as e:  # a timeout, or SIGTERM/SIGINT while waiting: take the step's processes down too
            if not isinstance(e, StepFailed):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                    os.wait4(p.pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
            if tfile and os.path.exists(tfile):
                os.remove(tfile)
            raise
    text = open(log_path).read()
    rss = None
    if tfile:
        ttext = open(tfile).read()
        os.remove(tfile)
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", ttext)
        rss = int(m.group(1)) if m else None
        m = re.search(r"Exit status: (\d+)", ttext)
        rc = int(m.group(1)) if m else p.returncode
    else:
        rss = ru.ru_maxrss  # KiB on Linux
        rc = p.returncode
    if rc != 0:
        tail = "\n".join(text.splitlines()[-15:])
        raise StepFailed(f"exit status {rc} (log {tilde(log_path)}):\n{tail}")
    return text, rss


def wait_quiet(max_wait_s, threshold=0.25):
    """Waits (up to max_wait_s) until other processes use under threshold of the machine over a
    1-second window; returns the seconds waited and the last share seen."""
    waited, share = 0.0, None
    while True:
        b0, t0 = cpu_busy_s(), time.monotonic()
        time.sleep(1.0)
        share = (cpu_busy_s() - b0) / ((time.monotonic() - t0) * os.cpu_count())
        if share < threshold or waited >= max_wait_s:
            return waited, share
        time.sleep(4.0)
        waited += 5.0


# ----------------------------------------------------------------------------- the driver

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def drive(a):
    start = time.monotonic()
    deadline = start + a.budget_s
    work = a.work_dir
    os.makedirs(work, exist_ok=True)
    extra = shlex.split(os.environ.get("OSCAR_BENCH_ARGS", ""))
    oscar_kvs = ["bf16", "int8"] + (["int2-oscar"] if a.rotations else [])
    llama_kvs = ["f16", "q8_0"]
    configs = [("llama.cpp", k) for k in llama_kvs] + [("oscar", k) for k in oscar_kvs]
    # interleave: llama.cpp and oscar alternate within a repetition
    order = []
    lq, oq = list(configs[:2]), list(configs[2:])
    while lq or oq:
        if lq:
            order.append(lq.pop(0))
        if oq:
            order.append(oq.pop(0))

    short_p = [16, 512]
    plans = [("short", [(p, a.n_short) for p in short_p])] + [(f"depth{d}", [(d, a.n_long)]) for d in a.depths]
    # Depths past 4096 take minutes of prefill per config on 2 cores: --deep-configs can limit
    # them to the pairs a target compares (e.g. "llama.cpp:q8_0,oscar:int2-oscar").
    deep_plans = {f"depth{d}" for d in a.depths if d > 4096}
    deep_only = {c for c in a.deep_configs.split(",") if c}
    notes = list(a.note or [])
    samples = {}  # (engine, kv, measure) -> list of tokens/s
    rss = {}  # (engine, kv, plan) -> list of KiB
    other = {}  # (engine, kv, plan) -> share of the CPUs other processes used during each sample
    last_keys = set()  # the sample keys the last group recorded
    discarded = []
    memory = []
    llama_info = {}
    failures = []
    commands = {}
    rep_times = []

    def oscar_cmd(kv, plan_groups, json_out):
        ps = ",".join(str(p) for p, _ in plan_groups)
        n = plan_groups[0][1]
        cmd = [a.oscar_bin, "bench", "-m", a.model, "-t", str(a.threads), "--kv", kv, "-p", ps, "-n", str(n),
               "-r", "1", "--json", json_out]
        if kv == "int2-oscar":
            cmd += ["--rotations", a.rotations]
        return cmd + extra

    def measure_name(plan_name, p, is_prefill):
        if plan_name == "short":
            if p == 16:
                return "prefill_16" if is_prefill else "decode_short"
            return f"prefill_{p}" if is_prefill else f"decode_after_{p}"
        return f"prefill_{p}" if is_prefill else f"decode_after_{p}"

    def record(engine, kv, plan_name, groups, peak):
        last_keys.clear()
        for g in groups:
            p = g["prompt_tokens"]
            key = (engine, kv, measure_name(plan_name, p, True))
            samples.setdefault(key, []).append(g["prefill"])
            last_keys.add(key)
            if g["decode"] is not None:
                key = (engine, kv, measure_name(plan_name, p, False))
                samples.setdefault(key, []).append(g["decode"])
                last_keys.add(key)
        rss.setdefault((engine, kv, plan_name), []).append(peak)

    def run_group(engine, kv, plan_name, plan_groups, rep):
        """One sample; a sample during which other processes took over a.max_other of the CPUs is
        discarded and run again (twice at most): llama.cpp's OpenMP threads collapse under contention."""
        for attempt in range(a.retries + 1):
            share = run_group_once(engine, kv, plan_name, plan_groups, rep, attempt)
            if share is None or share <= a.max_other or attempt == a.retries:
                summarize("partial")  # a checkpoint: the file holds every finished sample
                return
            discarded.append({"step": f"{engine}-{kv}-{plan_name}-r{rep}", "attempt": attempt,
                              "other_cpu_share": round(share, 3)})
            # undo the sample just recorded
            for key in last_keys:
                samples[key].pop()
            rss[(engine, kv, plan_name)].pop()
            other[(engine, kv, plan_name)].pop()
            print(f"  discarded (other processes took {share:.0%} of the CPUs > {a.max_other:.0%}); again",
                  file=sys.stderr, flush=True)

    def run_group_once(engine, kv, plan_name, plan_groups, rep, attempt):
        waited, busy = wait_quiet(min(a.wait_quiet_s, max(0.0, deadline - time.monotonic() - 60)))
        if waited:
            print(f"  (waited {waited:.0f} s for other processes to quieten; {busy:.0%} of the CPUs busy at the end)",
                  file=sys.stderr, flush=True)
        left = deadline - time.monotonic()
        tmo = min(a.step_timeout_s, left)
        tag = f"{engine}-{kv}-{plan_name}-r{rep}" + (f"-again{attempt}" if attempt else "")
        log = os.path.join(work, tag + ".log")
        jout = os.path.join(work, tag + ".json")
        t0 = time.monotonic()
        try:
            if engine == "oscar":
                cmd = oscar_cmd(kv, plan_groups, jout)
                commands[f"oscar {kv} {plan_name}"] = tilde(" ".join(shlex.quote(c) for c in cmd))
                _, peak = run_measured(cmd, tmo, log)
                rows = json.load(open(jout))
                groups = [{"prompt_tokens": r["depth"], "prefill": r["prefill_tokens_per_s"],
                           "decode": r["decode_tokens_per_s"] if r["n_gen"] else None} for r in rows]
            else:
                n_ctx = max(p + n for p, n in plan_groups) + 64
                n_ctx = (n_ctx + 255) // 256 * 256
                cmd = [sys.executable, os.path.abspath(__file__), "llama-worker", "--model", a.model, "--kv", kv,
                       "--threads", str(a.threads), "--n-ctx", str(n_ctx), "--text", a.text,
                       "--plan", json.dumps(plan_groups), "--out", jout]
                commands[f"llama.cpp {kv} {plan_name}"] = tilde(" ".join(shlex.quote(c) for c in cmd))
                _, peak = run_measured(cmd, tmo, log)
                res = json.load(open(jout))
                llama_info.setdefault(kv, {}).update({k: v for k, v in res.items() if k != "groups"})
                llama_info[kv].setdefault("by_plan", {})[plan_name] = {
                    "n_ctx": res["n_ctx"], "kv_bytes_allocated": res["kv_bytes_allocated"], "peak_rss_kib": peak}
                groups = [{"prompt_tokens": g["prompt_tokens"], "prefill": g["prefill_tokens_per_s"],
                           "decode": g["decode_tokens_per_s"],
                           "internal": [g["internal_prefill_tokens_per_s"], g["internal_decode_tokens_per_s"]]}
                          for g in res["groups"]]
                for g in groups:
                    llama_info[kv].setdefault("internal_timers", []).append(
                        {"plan": plan_name, "rep": rep, "prompt_tokens": g["prompt_tokens"],
                         "wall_prefill": g["prefill"], "internal_prefill": g["internal"][0],
                         "wall_decode": g["decode"], "internal_decode": g["internal"][1]})
        except StepFailed as e:
            failures.append({"step": tag, "error": str(e)})
            print(f"  {tag}: FAILED: {e}", file=sys.stderr, flush=True)
            return None
        share = LAST_FOREIGN.get("share")
        record(engine, kv, plan_name, groups, peak)
        other.setdefault((engine, kv, plan_name), []).append(share)
        desc = ", ".join(f"p{g['prompt_tokens']}: prefill {g['prefill']:.1f}"
                         + (f" decode {g['decode']:.2f}" if g["decode"] is not None else "") for g in groups)
        print(f"  {tag}: {desc} tok/s, peak RSS {peak / 1024 if peak else float('nan'):.0f} MiB, "
              f"other processes {share if share is not None else float('nan'):.0%} of the CPUs "
              f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
        return share

    def measure_all():
        for rep in range(a.reps):
            t_rep = time.monotonic()
            if rep > 0 and rep_times:
                # another repetition only when it fits (the first one always runs, step by step)
                if time.monotonic() + max(rep_times) > deadline:
                    notes.append(f"only {rep} repetition(s) of {a.reps}: the next one would pass the time budget "
                                 f"({a.budget_s:.0f} s)")
                    break
            rot = rep % len(order)
            rep_order = order[rot:] + order[:rot]
            for plan_name, plan_groups in plans:
                print(f"== {a.model_key}: repetition {rep + 1}/{a.reps}, {plan_name} "
                      f"({(time.monotonic() - start) / 60:.1f} min in)", file=sys.stderr, flush=True)
                for engine, kv in rep_order:
                    if plan_name in deep_plans and deep_only and f"{engine}:{kv}" not in deep_only:
                        continue
                    run_group(engine, kv, plan_name, plan_groups, rep)
            rep_times.append(time.monotonic() - t_rep)
            print(f"== repetition {rep + 1} took {rep_times[-1]:.0f} s", file=sys.stderr, flush=True)

        # memory and real-text check: one `oscar run -c CTX` per KV mode on the eval text
        if a.mem_ctx > 0:
            import llama_cpp
            voc = llama_cpp.Llama(model_path=a.model, vocab_only=True, verbose=False)
            n_prompt = a.mem_ctx - a.mem_gen - 64  # room for tokenizer differences
            toks = text_tokens(voc, a.text, n_prompt)
            prompt_file = os.path.join(work, f"prompt_{a.mem_ctx}.txt")
            with open(prompt_file, "wb") as f:
                f.write(voc.detokenize(toks))
            del voc
            print(f"== {a.model_key}: memory runs (oscar run -c {a.mem_ctx}, {n_prompt} tokens of the eval text)",
                  file=sys.stderr, flush=True)
            for kv in [k for k in oscar_kvs if not a.mem_kvs or k in a.mem_kvs.split(",")]:
                cmd = [a.oscar_bin, "run", "-m", a.model, "-t", str(a.threads), "-c", str(a.mem_ctx), "--kv", kv,
                       "-f", prompt_file, "--no-display-prompt", "-n", str(a.mem_gen), "--temp", "0"]
                if kv == "int2-oscar":
                    cmd += ["--rotations", a.rotations]
                cmd += extra
                commands[f"oscar {kv} run"] = tilde(" ".join(shlex.quote(c) for c in cmd))
                log = os.path.join(work, f"oscar-{kv}-run.log")
                wait_quiet(min(a.wait_quiet_s, max(0.0, deadline - time.monotonic() - 60)))
                try:
                    text, peak = run_measured(cmd, min(a.step_timeout_s, deadline - time.monotonic()), log)
                except StepFailed as e:
                    failures.append({"step": f"oscar-{kv}-run", "error": str(e)})
                    print(f"  oscar {kv} run: FAILED: {e}", file=sys.stderr, flush=True)
                    continue
                m = re.search(r"prompt: (\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s\); generation: (\d+) tokens in "
                              r"([\d.]+) s \(([\d.]+) tokens/s\)", text)
                k = re.search(r"KV cache \(([^)]*)\): (\d+) tokens, ([\d.]+) (KiB|MiB|GiB|B)\b", text)
                kv_bytes = None
                if k:
                    kv_bytes = float(k.group(3)) * {"B": 1, "KiB": 1024, "MiB": 2**20, "GiB": 2**30}[k.group(4)]
                row = {"engine": "oscar", "kv": kv, "command": "oscar run", "ctx_size": a.mem_ctx,
                       "prompt_tokens": int(m.group(1)) if m else None,
                       "generated_tokens": int(m.group(4)) if m else None,
                       "prefill_tokens_per_s": float(m.group(3)) if m else None,
                       "decode_tokens_per_s": float(m.group(6)) if m else None,
                       "kv_tokens": int(k.group(2)) if k else None, "kv_bytes": kv_bytes,
                       "kv_line": k.group(0) if k else None,
                       "model_file_bytes": a.model_bytes, "peak_rss_bytes": peak * 1024 if peak else None,
                       "other_cpu_share": LAST_FOREIGN.get("share")}
                if peak and kv_bytes is not None:
                    row["rss_over_file_plus_kv"] = peak * 1024 / (a.model_bytes + kv_bytes)
                memory.append(row)
                print(f"  oscar {kv} run: {row['prompt_tokens']} prompt tokens, prefill {row['prefill_tokens_per_s']} "
                      f"decode {row['decode_tokens_per_s']} tok/s, KV {kv_bytes and kv_bytes / 2**20:.1f} MiB, "
                      f"peak RSS {peak / 1024:.0f} MiB, ratio {row.get('rss_over_file_plus_kv', float('nan')):.2f}",
                      file=sys.stderr, flush=True)


    def summarize(status):
        """Rows, ratios and the JSON file; status: complete, or partial (a checkpoint, or a run stopped early)."""
        # ---------------------------------------------------------------- rows, ratios, JSON
        rows = []
        measures_order = ["prefill_512", "decode_short"] + [f"decode_after_{d}" for d in a.depths] + \
                         ["prefill_16", "decode_after_512"] + [f"prefill_{d}" for d in a.depths]
        for measure in measures_order:
            for engine, kv in configs:
                xs = samples.get((engine, kv, measure))
                if not xs:
                    continue
                if measure == "decode_short":
                    prompt, n = 16, a.n_short
                elif measure.startswith("decode_after_"):
                    prompt = int(measure.rsplit("_", 1)[1])
                    n = a.n_short if prompt == 512 else a.n_long
                else:
                    prompt, n = int(measure.rsplit("_", 1)[1]), 0
                plan_name = "short" if measure in ("prefill_16", "prefill_512", "decode_short", "decode_after_512") \
                    else f"depth{prompt}"
                shares = other.get((engine, kv, plan_name), [])
                clean = [x for x, sh in zip(xs, shares) if sh is None or sh <= a.max_other]
                rows.append({"engine": engine, "kv": kv, "measure": measure, "tokens_per_s": median(clean or xs),
                             "samples": xs, "reps": len(xs), "reps_in_median": len(clean) if clean else len(xs),
                             "threads": a.threads, "prompt_tokens": prompt,
                             "decode_tokens": n if measure.startswith("decode") else None,
                             "target_measure": measure in ("prefill_512", "decode_short", "decode_after_4096",
                                                           "decode_after_16384"),
                             "prompt_ids": "eval text" if engine == "llama.cpp" else "random",
                             "peak_rss_bytes": (median(rss.get((engine, kv, plan_name), [])) or 0) * 1024 or None,
                             "other_cpu_share": [None if x is None else round(x, 3)
                                                 for x in other.get((engine, kv, plan_name), [])]})

        def get(engine, kv, measure):
            for r in rows:
                if (r["engine"], r["kv"], r["measure"]) == (engine, kv, measure):
                    return r["tokens_per_s"]
            return None

        def best_oscar(measure):
            c = [(get("oscar", k, measure), k) for k in oscar_kvs]
            c = [x for x in c if x[0] is not None]
            return max(c) if c else (None, None)

        targets = []

        def target(name, num, num_label, den, den_label, goal):
            ratio = num / den if num and den else None
            targets.append({"target": name, "oscar": num_label, "oscar_tokens_per_s": num, "llama_cpp": den_label,
                            "llama_cpp_tokens_per_s": den, "ratio": ratio, "goal": goal,
                            "met": (ratio >= goal) if ratio is not None and goal is not None else None})

        bo, bk = best_oscar("decode_short")
        target("decode_short", bo, f"oscar {bk} (best KV)", get("llama.cpp", "f16", "decode_short"), "llama.cpp f16", 1.0)
        target("decode_short (like for like)", get("oscar", "bf16", "decode_short"), "oscar bf16",
               get("llama.cpp", "f16", "decode_short"), "llama.cpp f16", 1.0)
        for d in a.depths:  # the goals are at 4096 and 16384; other depths (--quick) are informational
            target(f"decode_after_{d}", get("oscar", "int2-oscar", f"decode_after_{d}"), "oscar int2-oscar",
                   get("llama.cpp", "q8_0", f"decode_after_{d}"), "llama.cpp q8_0", {4096: 1.3, 16384: 1.5}.get(d))
        bo, bk = best_oscar("prefill_512")
        lf = get("llama.cpp", "f16", "prefill_512")
        target("prefill_512", bo, f"oscar {bk} (best KV)", lf, "llama.cpp f16", 0.8)
        target("prefill_512 (like for like)", get("oscar", "bf16", "prefill_512"), "oscar bf16", lf, "llama.cpp f16", 0.8)
        for m in memory:
            if m["kv"] == "int2-oscar" or (not a.rotations and m["kv"] == "int8"):
                r = m.get("rss_over_file_plus_kv")
                scope = "" if a.model_key == "qwen25" and a.mem_ctx == 4096 else " (the goal is set for Qwen2.5 at 4096)"
                targets.append({"target": f"memory: peak RSS of oscar run -c {a.mem_ctx} ({m['kv']}) / (file + KV){scope}",
                                "ratio": r, "goal": 1.2, "met": (r <= 1.2) if r is not None else None,
                                "goal_is_max": True})

        doc = {"device": a.device, "date": datetime.date.today().isoformat(), "commit": a.commit,
               "command": a.command, "quick": a.quick, "status": status,
               "model": a.model_key, "model_file": tilde(a.model), "model_file_bytes": a.model_bytes,
               "threads": a.threads, "load_avg_at_start": a.load_at_start,
               "load_avg_at_end": " ".join(open("/proc/loadavg").read().split()[:3]),
               "wall_s": round(time.monotonic() - start, 1),
               "settings": {"reps": a.reps, "reps_done": len(rep_times), "statistic": "median over repetitions",
                            "short_prompts": short_p, "n_short": a.n_short, "depths": a.depths, "n_long": a.n_long,
                            "memory_ctx": a.mem_ctx, "order": [f"{e} {k}" for e, k in order] +
                            ["(rotated by one configuration each repetition)"],
                            "eval_text": tilde(a.text),
                            "llama_cpp": "Llama(n_threads=2, n_threads_batch=2, n_batch=512, n_ubatch=512, "
                                         "flash_attn=True, type_k=type_v=F16|Q8_0, logits_all=False); eval(prompt) "
                                         "then eval([argmax]) per decode step; n_ctx = longest prompt + decode + 64, "
                                         "rounded up to 256",
                            "oscar": "oscar bench -r 1 (one fresh process per group); random token ids",
                            "oscar_extra_args": os.environ.get("OSCAR_BENCH_ARGS", ""),
                            "other_cpu_share": "per sample: CPU time of other processes during the step / (wall time x "
                                               "cores), from /proc/stat less the step's own rusage; each step first "
                                               f"waits up to {a.wait_quiet_s:.0f} s for the machine to be < 25 % busy; "
                                               f"a sample above {a.max_other:.0%} is discarded and run again "
                                               f"({a.retries} times at most; see discarded_samples); a sample still "
                                               "above it after that is kept in samples but left out of the median "
                                               "when the row has a clean one (reps_in_median)"},
               "oscar": {"bin": tilde(a.oscar_bin), "bin_source": tilde(a.oscar_bin_source), "bin_sha256": a.bin_sha,
                     "bin_source_mtime": a.bin_mtime,
                         "rotations": tilde(a.rotations) if a.rotations else None, "rotations_how": a.rotations_how,
                         "git_dirty": a.git_dirty},
               "peer": {"package": f"llama-cpp-python=={a.peer_version}", "requirements": "bench/peer_requirements.txt",
                        "build": "CMAKE_ARGS=-DGGML_AVX2=on -DGGML_FMA=on -DGGML_F16C=on -DGGML_NATIVE=off",
                        "note": a.peer_note or None,
                        "kv": {k: {kk: vv for kk, vv in v.items()} for k, v in llama_info.items()}},
               "rows": rows, "targets": targets, "memory": memory, "commands": commands,
               "discarded_samples": discarded, "failures": failures, "notes": notes}
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, a.out)
        if status == "complete":
            print_table(doc, configs)
            print(f"\nwritten: {a.out}")
        return doc

    def on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        measure_all()
    except (SystemExit, KeyboardInterrupt) as e:
        notes.append(f"stopped early ({type(e).__name__} {getattr(e, 'code', '')}): the rows hold what was measured")
        summarize("partial")
        print(f"cpu_peer.py: stopped early; partial results in {a.out}", file=sys.stderr, flush=True)
        raise
    doc = summarize("complete")
    return 1 if failures and not doc["rows"] else 0


def fmt(x, d=1):
    return "" if x is None else f"{x:.{d}f}"


def print_table(doc, configs):
    print(f"\n### {doc['model']} ({os.path.basename(doc['model_file'])}, {doc['model_file_bytes'] / 2**20:.0f} MiB), "
          f"{doc['threads']} threads\n")
    print(f"{doc['device']}, commit {doc['commit'][:10]}, {doc['date']}; median of "
          f"{doc['settings']['reps_done']} repetition(s); load average {doc['load_avg_at_start']} at start\n")
    cols = [f"{e} {k}" for e, k in configs]
    print("| tokens/s | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    by = {}
    for r in doc["rows"]:
        by.setdefault(r["measure"], {})[f"{r['engine']} {r['kv']}"] = r["tokens_per_s"]
    for measure, vals in by.items():
        label = measure if any(r["target_measure"] for r in doc["rows"] if r["measure"] == measure) else f"_{measure}_"
        print(f"| {label} | " + " | ".join(fmt(vals.get(c), 2 if measure.startswith("decode") else 1)
                                           for c in cols) + " |")
    rss = {}
    for r in doc["rows"]:
        if r["peak_rss_bytes"] and r["measure"] in ("decode_short",) + tuple(
                f"decode_after_{d}" for d in doc["settings"]["depths"]):
            rss.setdefault(r["measure"], {})[f"{r['engine']} {r['kv']}"] = r["peak_rss_bytes"] / 2**20
    for measure, vals in rss.items():
        print(f"| _peak RSS MiB, {measure} run_ | " + " | ".join(fmt(vals.get(c), 0) for c in cols) + " |")
    print("\n| target | oscar | llama.cpp | ratio | goal | met |\n|---|---|---|---:|---:|---|")
    for t in doc["targets"]:
        goal = "" if t["goal"] is None else ("≤ " if t.get("goal_is_max") else "≥ ") + f"{t['goal']}"
        o = f"{t['oscar']}: {fmt(t['oscar_tokens_per_s'], 2)}" if "oscar" in t else ""
        l = f"{t['llama_cpp']}: {fmt(t['llama_cpp_tokens_per_s'], 2)}" if "llama_cpp" in t else ""
        met = "" if t["met"] is None else ("yes" if t["met"] else "no")
        print(f"| {t['target']} | {o} | {l} | {fmt(t['ratio'], 2)} | {goal} | {met} |")
    if doc["memory"]:
        print("\n| oscar run (eval text) | ctx | prompt tok | prefill tok/s | decode tok/s | KV MiB | file MiB | "
              "peak RSS MiB | RSS / (file + KV) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for m in doc["memory"]:
            print(f"| {m['kv']} | {m['ctx_size']} | {m['prompt_tokens']} | {fmt(m['prefill_tokens_per_s'])} | "
                  f"{fmt(m['decode_tokens_per_s'], 2)} | {fmt(m['kv_bytes'] and m['kv_bytes'] / 2**20)} | "
                  f"{m['model_file_bytes'] / 2**20:.0f} | {fmt(m['peak_rss_bytes'] and m['peak_rss_bytes'] / 2**20, 0)} | "
                  f"{fmt(m.get('rss_over_file_plus_kv'), 2)} |")
    shares = [x for r in doc["rows"] for x in r["other_cpu_share"] if x is not None]
    if shares:
        print(f"\nother processes used at most {max(shares):.0%} of the CPUs during a sample "
              f"(median {statistics.median(shares):.0%})")
    for n in doc["notes"]:
        print(f"\nnote: {n}")
    for f in doc["failures"]:
        print(f"\nFAILED {f['step']}: {f['error']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("llama-worker")
    w.add_argument("--model", required=True)
    w.add_argument("--kv", choices=list(GGML_TYPE), required=True)
    w.add_argument("--threads", type=int, default=2)
    w.add_argument("--n-ctx", type=int, required=True)
    w.add_argument("--text", required=True)
    w.add_argument("--plan", required=True, help='JSON [[prompt_tokens, n_gen], ...]')
    w.add_argument("--out", required=True)
    d = sub.add_parser("drive")
    d.add_argument("--model", required=True)
    d.add_argument("--model-key", required=True)
    d.add_argument("--oscar-bin", required=True)
    d.add_argument("--oscar-bin-source", default="")
    d.add_argument("--rotations", default="")
    d.add_argument("--rotations-how", default="")
    d.add_argument("--text", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--work-dir", required=True)
    d.add_argument("--threads", type=int, default=2)
    d.add_argument("--reps", type=int, default=3)
    d.add_argument("--n-short", type=int, default=128)
    d.add_argument("--n-long", type=int, default=32)
    d.add_argument("--depths", type=lambda s: [int(x) for x in s.split(",") if x], default=[4096])
    d.add_argument("--deep-configs", default="", help="engine:kv pairs measured at depths past 4096 (default: all)")
    d.add_argument("--mem-kvs", default="", help="oscar KV modes of the memory runs (default: all)")
    d.add_argument("--mem-ctx", type=int, default=4096)
    d.add_argument("--mem-gen", type=int, default=32)
    d.add_argument("--budget-s", type=float, default=3600)
    d.add_argument("--step-timeout-s", type=float, default=1200)
    d.add_argument("--quick", action="store_true")
    d.add_argument("--max-other", type=float, default=0.10,
                   help="discard and rerun a sample when other processes took more than this share of the CPUs")
    d.add_argument("--retries", type=int, default=2)
    d.add_argument("--wait-quiet-s", type=float, default=300,
                   help="before each step, wait up to this long for other processes to use < 25%% of the CPUs")
    d.add_argument("--note", action="append")
    for k in ("device", "commit", "command", "load_at_start", "peer_version", "peer_note", "git_dirty"):
        d.add_argument("--" + k.replace("_", "-"), default="")
    a = ap.parse_args()
    if a.cmd == "llama-worker":
        llama_worker(a)
        return 0
    a.model_bytes = os.path.getsize(a.model)
    h = hashlib.sha256()
    with open(a.oscar_bin, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    a.bin_sha = h.hexdigest()
    a.git_dirty = a.git_dirty == "1"
    src = a.oscar_bin_source or a.oscar_bin
    a.bin_mtime = datetime.datetime.fromtimestamp(os.path.getmtime(src), datetime.timezone.utc).isoformat(
        timespec="seconds") if os.path.exists(src) else None
    return drive(a)


if __name__ == "__main__":
    sys.exit(main())
