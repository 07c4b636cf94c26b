# Sourced (not run) by scripts/fuzz.sh and scripts/soak.sh, from the repo root after env.sh:
# the one build with clang, ASan, UBSan and libFuzzer's coverage over every library
# (-DOSCAR_FUZZ=ON, no CUDA) in $sanitized_build. sanitized_build_targets T... builds those targets.
sanitized_build="${OSCAR_BUILD}-fuzz"
sanitized_build_targets() {
  command -v clang++-14 >/dev/null || { echo "$(basename "$0"): clang++-14 not found (scripts/setup.sh installs it)" >&2; exit 1; }
  cmake -S . -B "$sanitized_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
    -DCMAKE_CXX_COMPILER=clang++-14 -DOSCAR_FUZZ=ON -DOSCAR_CUDA=OFF -DOSCAR_WERROR=OFF >/dev/null
  cmake --build "$sanitized_build" -j "$(nproc)" --target "$@"
}
