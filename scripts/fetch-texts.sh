#!/usr/bin/env bash
# Installs the two English prose texts oscar uses, idempotently, into $OSCAR_CACHE/data:
#   calib.txt  calibration text  = Jane Austen, "Persuasion"          (~466 KB)
#   eval.txt   evaluation text   = Jane Austen, "Pride and Prejudice" (~680 KB)
# Both come from the Debian package r-cran-janeaustenr (pinned below; the novels are public
# domain, the package is MIT). Only the .deb is fetched and unpacked (apt-get download +
# dpkg-deb -x); R is not installed: the novels are read straight out of the package's R
# lazy-load database (data/Rdata.rdx + Rdata.rdb) by the stdlib-only Python reader in scripts/corpus.py.
# Cleaning: hard-wrapped lines are joined into one line per paragraph, runs of spaces become
# one, the _italic_ underscores are dropped, and paragraphs are separated by one blank line.
# The results are checked against the sha256 values below. See docs/texts.md.
#   bash scripts/fetch-texts.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

deb_name=r-cran-janeaustenr
deb_version=1.0.0-1
data_dir="$OSCAR_CACHE/data"
calib="$data_dir/calib.txt"
eval_txt="$data_dir/eval.txt"
calib_sha=ea05f5bd05c12e0b8a04e80ff9f65cb37920658ac47d07a58f615733f93664d2
eval_sha=e739071c8708d3afd59aca3a98a43531d5939e84a9bccaeb28a93774dcfc065e

say() { echo "[fetch-texts] $*"; }
die() { echo "[fetch-texts] ERROR: $*" >&2; exit 1; }
sha_ok() { [[ -f "$1" ]] && echo "$2  $1" | sha256sum -c --quiet - >/dev/null 2>&1; }
report() {
  say "calib.txt: $(stat -c %s "$calib") bytes, sha256 $calib_sha  ($calib)"
  say "eval.txt:  $(stat -c %s "$eval_txt") bytes, sha256 $eval_sha  ($eval_txt)"
}

if sha_ok "$calib" "$calib_sha" && sha_ok "$eval_txt" "$eval_sha"; then
  say "already present and verified"
  report
  exit 0
fi

command -v dpkg-deb >/dev/null || die "dpkg-deb not found (Debian machine expected)"
command -v apt-get >/dev/null || die "apt-get not found (Debian machine expected)"
py="$OSCAR_VENV/bin/python"
[[ -x "$py" ]] || py="$(command -v python3 || true)"
[[ -n "$py" ]] || die "no python3 found"
mkdir -p "$data_dir" || die "cannot create $data_dir"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fetch-texts.XXXXXX")"
trap 'rm -rf "$tmp"; rm -f "$calib.part" "$eval_txt.part"' EXIT
trap 'exit 130' INT TERM
chmod 755 "$tmp"  # lets apt's _apt user write the .deb there (else apt warns and goes unsandboxed)

# apt-get download needs the package lists; refresh them once if the pinned version is unknown.
download() { (cd "$tmp" && apt-get download -q "$1" >/dev/null 2>&1); }
if ! download "$deb_name=$deb_version"; then
  say "refreshing apt package lists"
  sudo_cmd=""; [[ $(id -u) == 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq || die "apt-get update failed"
  if ! download "$deb_name=$deb_version"; then
    # A Debian point release could replace the version; the sha256 checks below still decide.
    say "WARNING: $deb_name=$deb_version unavailable, trying the current version"
    download "$deb_name" || die "apt-get download $deb_name failed"
  fi
fi
debs=("$tmp"/"$deb_name"_*.deb)
[[ -f "${debs[0]}" ]] || die "no .deb downloaded"
say "unpacking $(basename "${debs[0]}")"
dpkg-deb -x "${debs[0]}" "$tmp/root" || die "dpkg-deb -x failed"
rdata="$tmp/root/usr/lib/R/site-library/janeaustenr/data/Rdata"
[[ -f "$rdata.rdx" && -f "$rdata.rdb" ]] || die "$deb_name has no data/Rdata.rdx/.rdb"

# The R lazy-load reader and the cleaning live in scripts/corpus.py (which reads the same
# package for the corpus): one copy of each.
"$py" - "$here" "$rdata" persuasion "$calib.part" prideprejudice "$eval_txt.part" <<'PY' || die "text extraction failed"
import sys
sys.path.insert(0, sys.argv[1])
from corpus import novel_text, r_character_vector
base, pairs = sys.argv[2], sys.argv[3:]
for name, dest in zip(pairs[0::2], pairs[1::2]):
    with open(dest, "w", encoding="utf-8", newline="\n") as f:
        f.write(novel_text(r_character_vector(base, name)))
PY

for pair in "$calib:$calib_sha" "$eval_txt:$eval_sha"; do
  f="${pair%%:*}"; want="${pair##*:}"
  got="$(sha256sum "$f.part" | cut -d' ' -f1)"
  [[ "$got" == "$want" ]] || die "sha256 mismatch for $(basename "$f"): got $got, expected $want"
  mv -f "$f.part" "$f"
done
report
