#!/usr/bin/env bash
# Regenerates docs/planner-results.md (bench_planner): every strategy on the shared workloads, then on the generated graphs.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib.sh"
karma_build "$KARMA_ROOT/build" >/dev/null
bench="$KARMA_ROOT/build/bin/bench_planner"
out="$KARMA_ROOT/docs/planner-results.md"
"$bench" --solver heuristic --markdown "$out" --heading "Shared workloads"
"$bench" --solver heuristic --markdown "$out" --append --heading "Generated graphs (tools/graphgen; efficientnet_b0 and vit_b_16 held out)" \
  "$KARMA_ROOT"/tests/data/graphs/*.json
