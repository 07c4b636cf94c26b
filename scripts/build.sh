#!/usr/bin/env bash
# Configures and builds oscar (Release) into $OSCAR_BUILD (default: build/).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
cd "$here/.."
cmake -S . -B "$OSCAR_BUILD" -DCMAKE_BUILD_TYPE=Release "$@" > "$OSCAR_BUILD.configure.log" 2>&1 \
  || { cat "$OSCAR_BUILD.configure.log"; exit 1; }
cmake --build "$OSCAR_BUILD" -j"$(nproc)"
