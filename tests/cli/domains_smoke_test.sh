#!/usr/bin/env bash
# Smoke of the multi-domain evaluation (bench/domains.sh, issue 26) on the real default
# model: rotations calibrated on the corpus (small, no searches), then BF16 and OSCAR INT2
# on two held-out domains at 512 tokens, merged into one table. Asserts that the merged JSON
# has both domains, BF16 at KLD 0 and PPL ratio 1, and OSCAR INT2 with a finite KLD below
# 0.5 nats and a worst domain that is one of the two.
# Usage: domains_smoke_test.sh path/to/oscar
set -uo pipefail
bin="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/env.sh"
corpus="${OSCAR_CORPUS_DIR:-$OSCAR_CACHE/data/corpus}"
if [[ ! -f "$OSCAR_MODEL" || ! -f "$corpus/manifest.json" ]]; then
  if [[ "${OSCAR_REQUIRE_MODEL:-0}" == 1 ]]; then echo "0 passed, 1 failed (model or corpus missing)"; exit 1; fi
  echo "0 passed, 0 failed, 1 skipped (model or corpus missing)"; exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin" calibrate -m "$OSCAR_MODEL" --corpus "$corpus" --tokens 4000 --prompts 8 --no-clip-search -o "$tmp/rot" 2>&1 | tail -1
OSCAR_BIN="$bin" OSCAR_KV_MODES="bf16 int2-oscar" OSCAR_DOMAINS="code-go docs-en" OSCAR_CACHE="$tmp/cache" \
  bash "$here/../../bench/domains.sh" 512 1 "$tmp/smoke" "$OSCAR_MODEL" "$tmp/rot" > "$tmp/log" 2>&1
rc=$?
cat "$tmp/smoke.md" 2>/dev/null || tail -20 "$tmp/log"
py="${OSCAR_VENV:+$OSCAR_VENV/bin/}python3"
[[ -x "$py" ]] || py=python3
"$py" - "$tmp/smoke.json" "$rc" <<'PY'
import json, math, sys
path, rc = sys.argv[1], int(sys.argv[2])
checks = []
def expect(name, cond):
    checks.append(bool(cond))
    print(("ok   " if cond else "FAIL ") + name)
expect("domains.sh exits 0", rc == 0)
try:
    rows = {r["kv"]: r for r in json.load(open(path))}
except Exception as e:  # noqa: BLE001 - any unreadable output is a failure
    rows = {}
    print(f"cannot read {path}: {e}")
bf16, oscar = rows.get("bf16", {}), rows.get("int2-oscar", {})
expect("both domains in the table", set(oscar.get("kld_mean", {})) == {"code-go", "docs-en"})
expect("bf16: KLD 0, PPL ratio 1", bf16.get("worst_kld") == 0 and bf16.get("worst_ppl_ratio") == 1)
k = oscar.get("worst_kld", float("nan"))
expect(f"int2-oscar: worst KLD {k} finite, in (0, 0.5)", math.isfinite(k) and 0 < k < 0.5)
expect("int2-oscar: worst domain is one of the two", oscar.get("worst_domain") in ("code-go", "docs-en"))
expect("int2-oscar: bits per element below 16", 0 < oscar.get("bits_per_element", 99) < 16)
print(f"{sum(checks)} passed, {len(checks) - sum(checks)} failed")
sys.exit(0 if all(checks) else 1)
PY
