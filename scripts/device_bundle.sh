#!/usr/bin/env bash
# Packs what `oscar` needs on a GPU machine that has CUDA but none of our Debian packages
# and no network: the binary (built here with the CUDA backend), the shared libraries it
# links that such an image lacks, the test texts, and the Python wheels the server test and
# load benchmark use. Output: .device/ (git-ignored; name it in the device call's carry).
#   bash scripts/device_bundle.sh            # after scripts/build.sh on a machine with nvcc
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
cd "$here/.."
bin="$OSCAR_BUILD/oscar"
[[ -x "$bin" ]] || { echo "device_bundle: build oscar first ($bin)" >&2; exit 1; }
grep -q "libcudart" <(objdump -p "$bin") || { echo "device_bundle: $bin has no CUDA backend (configure with nvcc)" >&2; exit 1; }
out=.device
rm -rf "$out"
mkdir -p "$out/lib" "$out/data" "$out/wheels"
cp "$bin" "$out/oscar"
# Every library it links except glibc's, the C++ runtime and CUDA's own (the GPU image has those).
ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcud*|libcublas*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
cp "$OSCAR_CALIB_TEXT" "$out/data/calib.txt"
cp "$OSCAR_EVAL_TEXT" "$out/data/eval.txt"
# The clients for tests/serve/server_test.py and bench/serve_load.py, for the GPU image's Python 3.12.
"$OSCAR_VENV/bin/python" -m pip download -q --disable-pip-version-check --only-binary=:all: \
  --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
  -d "$out/wheels" openai==3.57.0 httpx==0.28.1
# 64 MiB travel to a device call in all: the libraries go compressed (serve_gpu.sh unpacks them).
tar -C "$out" -czf "$out/lib.tar.gz" lib && rm -rf "$out/lib"
gzip -9 "$out/oscar"
du -sh "$out" "$out"/*
