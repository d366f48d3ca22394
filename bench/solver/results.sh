#!/usr/bin/env bash
# Regenerates docs/solver-results.md (bench_solver): heuristic vs ILP karma plans, and the wall time of
# `karma-trace simulate --solver ilp`, on the shared workloads and linear chains of 1,000 and 10,000 ops.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib.sh"
karma_build "$KARMA_ROOT/build" >/dev/null
"$KARMA_ROOT/build/bin/bench_solver" --karma-trace "$KARMA_ROOT/build/bin/karma-trace" \
  --markdown "$KARMA_ROOT/docs/solver-results.md"
