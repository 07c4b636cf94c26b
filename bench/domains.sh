#!/usr/bin/env bash
# Every KV format on every held-out domain of the corpus (issue 26): bench/kv_modes.sh once per
# evaluation text listed in $OSCAR_CORPUS_DIR/manifest.json (role "eval", plain-text files), then
# bench/merge_domains.py puts them side by side: per KV mode, PPL / BF16 and mean KLD for each
# domain, the worst domain and the mean, with effective bits.
#   bench/domains.sh CTX CHUNKS OUT_PREFIX [MODEL] [ROTATIONS]
# Writes OUT_PREFIX_<domain>.{md,json} and OUT_PREFIX.{md,json}. OSCAR_KV_MODES as in
# kv_modes.sh (default here: bf16 int4 int2 int2-hadamard kivi2 int2-oscar); OSCAR_DOMAINS limits
# the domains (e.g. "code-go docs-en").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/env.sh"
ctx="$1" chunks="$2" out="$3" model="${4:-$OSCAR_MODEL}" rot="${5:-}"
corpus="${OSCAR_CORPUS_DIR:-$OSCAR_CACHE/data/corpus}"
[[ -f "$corpus/manifest.json" ]] || { echo "domains.sh: no corpus at $corpus (bash scripts/fetch-corpus.sh)" >&2; exit 1; }
export OSCAR_KV_MODES="${OSCAR_KV_MODES:-bf16 int4 int2 int2-hadamard kivi2 int2-oscar}"
py="${OSCAR_VENV:+$OSCAR_VENV/bin/}python3"
[[ -x "$py" ]] || py=python3
mapfile -t texts < <("$py" - "$corpus" "${OSCAR_DOMAINS:-}" <<'PY'
import json, sys
corpus, only = sys.argv[1], sys.argv[2].split()
for f in json.load(open(f"{corpus}/manifest.json"))["files"]:
    if f["role"] == "eval" and f["file"].endswith(".txt") and (not only or f["domain"] in only):
        print(f"{f['domain']}|{corpus}/{f['file']}")
PY
)
[[ ${#texts[@]} -gt 0 ]] || { echo "domains.sh: no evaluation texts selected" >&2; exit 1; }
parts=()
for entry in "${texts[@]}"; do
  domain="${entry%%|*}" text="${entry#*|}"
  echo "== $domain ($text)" >&2
  OSCAR_EVAL_TEXT="$text" bash "$here/kv_modes.sh" "$ctx" "$chunks" "${out}_$domain" "$model" "$rot"
  parts+=("$domain=${out}_$domain.json")
done
"$py" "$here/merge_domains.py" "$out" "${parts[@]}"
