#!/usr/bin/env bash
# What recording one iteration costs in wall clock on simcuda: per app and footprint (64 MiB device), the wall clock
# of a plain iteration (the app alone on a device that holds it, mean of iterations 3-11 from timestamps around
# each run of --iters 3 and --iters 12) and the recording's wall clock as libkarma.so logs it, with the bound the
# project holds it to (3 plain iterations + 1 s). Prints a markdown table; exits 1 when a recording exceeds it.
#   bench/recording/recording_cost.sh [BUILD_DIR]   (default: build)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
bin=$build/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
simrun() { "$root/scripts/simrun" --build "$build" "$@"; }
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'; }

status=0
echo "| app | footprint | alloc | plain iteration (s) | recording (s) | bound 3 x plain + 1 (s) | probes (s) | hashed |"
echo "|---|---|---|---|---|---|---|---|"
for app in mlp_trainer skipnet_trainer; do
  for fp in 192MiB; do
    for alloc in async segments; do
      args=(--footprint "$fp" --alloc "$alloc")
      short=$(seconds simrun --mem 1GiB -- "$bin/$app" --iters 3 "${args[@]}")
      long=$(seconds simrun --mem 1GiB -- "$bin/$app" --iters 12 "${args[@]}")
      plain=$(awk -v s="$short" -v l="$long" 'BEGIN { printf "%.2f", (l - s) / 9 }')
      KARMA_LOG=info KARMA_TRACE_DIR=$tmp/traces simrun --mem 64MiB --karma -- "$bin/$app" --iters 8 "${args[@]}" \
        >/dev/null 2>"$tmp/karma.err"
      line=$(grep -m1 '^karma: recording took' "$tmp/karma.err")
      rec=$(sed -E 's/.*recording took ([0-9.]+) s.*/\1/' <<<"$line")
      probes=$(sed -E 's/.*probes ([0-9.]+) s.*/\1/' <<<"$line")
      hashed=$(sed -E 's/.*probes [0-9.]+ s \(([^)]*) hashed.*/\1/' <<<"$line")
      bound=$(awk -v p="$plain" 'BEGIN { printf "%.2f", 3 * p + 1 }')
      [[ -n $line ]] || { echo "no recording line for $app $fp $alloc" >&2; status=1; continue; }
      echo "| $app | $fp | $alloc | $plain | $rec | $bound | $probes | $hashed |"
      [[ $alloc == segments ]] && continue  # the bound is for per-tensor allocations
      awk -v r="$rec" -v b="$bound" 'BEGIN { exit !(r <= b) }' || status=1
    done
  done
done
exit $status
