#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (unit tests, the
# end-to-end comparison with the NumPy reference on the real default model, CLI tests),
# then the fuzz targets for a short smoke and a one-minute soak of the server.
# Exits non-zero when any test fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
bash "$here/setup.sh"
bash "$here/build.sh"
cd "$here/.."
export OSCAR_REQUIRE_MODEL=1  # tests that need the model fail instead of skipping
ctest --test-dir "$OSCAR_BUILD" --output-on-failure -j2 --timeout 1200
# Every parser under libFuzzer, ASan and UBSan for a short smoke (scripts/fuzz.sh; longer: --seconds N).
bash "$here/fuzz.sh" --seconds 10
# The server under ASan and UBSan with disconnects, bad requests and stalled connections
# (scripts/soak.sh, bench/serve_soak.py): a 60-second version, measured from the end of its
# second wave. Its bounds are looser than the long soak's 5 %: a minute under ASan is not yet
# steady (RSS over 40 s: +15 %, the last of four waves +1.6 %; the live heap moves by up to
# 7 % from wave to wave of the 5-minute runs, docs/reliability.md).
bash "$here/soak.sh" --seconds 60 --waves 3 --warmup-waves 2 --clients 16 --stalled 100 --max-rss-growth 0.3 \
  --max-heap-growth 0.15
