#!/usr/bin/env bash
# The main job: install what is missing, build, and show karma-trace on a real model iteration.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

"$KARMA_ROOT/scripts/setup.sh"
karma_build "$KARMA_ROOT/build"
bin="$KARMA_ROOT/build/bin"
out="$KARMA_ROOT/build/demo"
mkdir -p "$out"
workload="$KARMA_ROOT/tests/data/workloads/resnet50-b128.json"

step() { printf '\n== %s\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }
step "What one ResNet-50 training iteration (batch 128) needs" "$bin/karma-trace" summary "$workload"
step "Import it as a .ktrace" "$bin/karma-trace" import "$workload" -o "$out/resnet50.ktrace"
step "Live memory; the dashed line is a 16 GiB V100's share for tensors at k=2 pressure" \
  "$bin/karma-trace" memory "$out/resnet50.ktrace" --rows 12 --capacity 5.31GiB --svg "$out/resnet50-memory.svg"
step "The ten longest ops on the paper's V100" "$bin/karma-trace" ops "$out/resnet50.ktrace" --sort time --top 10
step "Export for ui.perfetto.dev" "$bin/karma-trace" export "$out/resnet50.ktrace" --chrome "$out/resnet50.trace.json"
printf '\nPictures and traces are in %s\n' "$out"
