#!/usr/bin/env bash
# Runs tests/gpu/record_smoke.cu on a real GPU without KARMA and under KARMA_MODE=off|um|record; the checksums
# must match, and the recorded trace must open in karma-trace and hold the memset made through the driver API.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${KARMA_BUILD:-$root/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
"$nvcc" -O2 -cudart shared -o "$work/record_smoke" "$root/tests/gpu/record_smoke.cu"

run() { "$@" "$work/record_smoke" 12 | tee /dev/stderr | sed -n 's/^checksum //p'; }
plain=$(run env)
off=$(run env LD_PRELOAD="$build/lib/libkarma.so" KARMA_MODE=off)
um=$(run env LD_PRELOAD="$build/lib/libkarma.so" KARMA_MODE=um KARMA_LIVE=0)
rec=$(run env LD_PRELOAD="$build/lib/libkarma.so" KARMA_MODE=record KARMA_LOG=info KARMA_TRACE_DIR="$work/traces")
status=0
for pair in "off:$off" "um:$um" "record:$rec"; do
  if [[ ${pair#*:} != "$plain" ]]; then
    echo "FAIL: checksum under KARMA_MODE=${pair%%:*} is ${pair#*:}, without KARMA $plain" >&2
    status=1
  fi
done
trace=$(ls "$work"/traces/*.ktrace 2>/dev/null | head -1 || true)
if [[ -z $trace ]]; then
  echo "FAIL: no trace recorded" >&2
  status=1
else
  "$build/bin/karma-trace" summary "$trace"
  "$build/bin/karma-trace" ops "$trace" --sort id | tee "$work/ops.txt"
  # The gradient's zeroing goes through the driver's cuMemsetD32Async: recorded as a memset only if the lookup
  # handed out KARMA's wrapper.
  if ! grep -qw memset "$work/ops.txt"; then
    echo "FAIL: the driver's memset (cuMemsetD32Async) is not in the recorded iteration" >&2
    status=1
  fi
fi
[[ $status == 0 ]] && echo "record_smoke: OK"
exit $status
