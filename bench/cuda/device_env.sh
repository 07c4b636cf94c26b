# Sourced (not run) by the scripts that drive `oscar` on a GPU machine, from the repo root
# with .device/ carried (scripts/device_bundle.sh packs it; it travels compressed): unpacks
# the binary and its libraries, puts them on the path, sets $bin and $out ($OUT, or /tmp),
# and defines wait_ready.
[[ -d .device/lib ]] || tar -C .device -xzf .device/lib.tar.gz || exit 1
[[ -x .device/oscar ]] || { gunzip -k .device/oscar.gz && chmod +x .device/oscar; } || exit 1
export LD_LIBRARY_PATH="$PWD/.device/lib:${LD_LIBRARY_PATH:-}"
bin="$PWD/.device/oscar"
out="${OUT:-/tmp}"
mkdir -p "$out"

# An `oscar serve` started with --port 0: the port from its log once it listens, or fail
# (with the log's tail) when it exits or is not ready after 600 s. Polled every 0.25 s.
wait_ready() {  # log file, pid → port
  local log="$1" pid="$2"
  for _ in $(seq 1 2400); do
    if ! kill -0 "$pid" 2>/dev/null; then echo "server exited:" >&2; tail -20 "$log" >&2; return 1; fi
    local port; port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    if [[ -n "$port" ]]; then echo "$port"; return 0; fi
    sleep 0.25
  done
  echo "server not ready after 600 s" >&2; tail -20 "$log" >&2; return 1
}
