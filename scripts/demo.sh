#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs a trainer at 3x the simulated device's memory on
# simcuda, without KARMA and under `karma run`, and shows its recorded iteration and plan.
#   scripts/demo.sh [--app mlp_trainer|skipnet_trainer] [--mem 64MiB] [--iters 12] [--out DIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$KARMA_ROOT
app=mlp_trainer mem=64MiB iters=12 out=""
while (($#)); do
  case $1 in
    --app) app=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $mem =~ ^([0-9]+)MiB$ ]] || { echo "demo.sh: --mem takes MiB, e.g. 64MiB" >&2; exit 2; }
footprint=$((3 * ${BASH_REMATCH[1]}))MiB
"$root/scripts/setup.sh"
karma_build "$root/build"
out=${out:-$(mktemp -d /tmp/karma-demo.XXXXXX)}
mkdir -p "$out"
export KARMA_TRACE_DIR=$out/traces
simrun=("$root/scripts/simrun" --mem "$mem")
args=(--iters "$iters" --footprint "$footprint" --alloc async)
step() { printf '\n== %s\n$ %s\n' "$1" "${*:2}"; }

step "1. $app needs $footprint on a $mem device, without KARMA" "scripts/simrun --mem $mem -- $app ${args[*]}"
if "${simrun[@]}" -- "$root/build/bin/$app" "${args[@]}"; then
  echo "(unexpected: it fit)"
else
  echo "-> out of memory, as expected"
fi

step "2. the same under karma run (records an iteration, plans, replays; then sums up what it recorded)" \
  "scripts/simrun --mem $mem -- karma run --log info --summary -- $app ${args[*]}"
"${simrun[@]}" -- "$root/build/bin/karma" run --log info --trace-dir "$KARMA_TRACE_DIR" --summary -- \
  "$root/build/bin/$app" "${args[@]}"

step "3. for comparison: in core on a large device" "scripts/simrun -- $app ${args[*]}"
"$root/scripts/simrun" -- "$root/build/bin/$app" "${args[@]}" | tail -2

trace=$(ls "$KARMA_TRACE_DIR"/*.ktrace | head -1)
plan=$(ls "$KARMA_TRACE_DIR"/*.plan.json | head -1)
# libkarma.so plans for KARMA_CAPACITY (0.9) of the device's memory.
capacity=$(awk -v m="${mem%MiB}" 'BEGIN { printf "%.1fMiB", m * 0.9 }')
step "4. KARMA's plan for it, with a picture" "karma plan $trace --capacity $capacity --svg $out/plan.svg"
"$root/build/bin/karma" plan "$trace" --capacity "$capacity" --svg "$out/plan.svg" --stages 20
echo
echo "the plan libkarma.so replayed: $plan; the picture: $out/plan.svg"
