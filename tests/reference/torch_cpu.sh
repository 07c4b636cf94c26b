#!/usr/bin/env bash
# Real PyTorch for CPU use (making .pt fixtures, checking that torch.load reads what
# oscar writes) without its CUDA dependencies: PyPI's Linux wheel (~540 MB) installed
# with --no-deps under $OSCAR_TORCH_DIR, plus stub libraries for the CUDA libraries it
# links against (torch_cuda_stubs.py). The full dependency set would be several GB.
#
#   tests/reference/torch_cpu.sh install          # once; needs PyPI
#   tests/reference/torch_cpu.sh available        # exit 0 when torch imports
#   tests/reference/torch_cpu.sh python ARGS...   # the venv's python with torch
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${OSCAR_VENV:-$HOME/.cache/oscar/venv}"
dir="${OSCAR_TORCH_DIR:-$HOME/.cache/oscar/torch-cpu}"
pin="${OSCAR_TORCH_PIN:-torch==2.15.0}"

py() { LD_LIBRARY_PATH="$dir/stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONPATH="$dir/site" "$venv/bin/python" "$@"; }

case "${1:-}" in
  install)
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "$pin"
    rm -rf "$dir/site" "$dir/stubs"
    mkdir -p "$dir"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$dir/site" "$tmp"/torch-*.whl
    "$venv/bin/python" "$here/torch_cuda_stubs.py" "$dir/site/torch/lib" "$dir/stubs"
    py -c 'import torch; print("torch", torch.__version__, "imports")'
    ;;
  available)
    [[ -x "$venv/bin/python" && -d "$dir/site/torch" ]] || exit 1
    py -c 'import torch' >/dev/null 2>&1
    ;;
  python)
    shift
    py "$@"
    ;;
  *)
    echo "usage: $0 install | available | python ARGS..." >&2
    exit 2
    ;;
esac
