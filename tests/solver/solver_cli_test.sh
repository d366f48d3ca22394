#!/usr/bin/env bash
# karma-trace's Planner II options: --solver on simulate, compare and plan, and the plan cache shown in the output
# (stored on the first run, loaded with nothing solved on the second; KARMA_PLAN_CACHE and 'off').
# Usage: solver_cli_test.sh KARMA_TRACE DATA_DIR
set -uo pipefail
kt=$1
resnet=$2/workloads/resnet50-b128.json
# The ILP runs on VGG-16, whose GLPK solves all end optimal well within the limit; the limit is generous so that
# a slow (sanitized) build still leaves GLPK time after the heuristic.
vgg=$2/workloads/vgg16-b64.json
limit=(--solver-time-limit 60)
source "$(dirname "${BASH_SOURCE[0]}")/../common/cli_lib.sh"
export KARMA_PLAN_CACHE=off

"$kt" simulate "$resnet" --pressure 3 --strategy karma --solver heuristic >"$work/h.txt" || fail "simulate --solver heuristic"
grep -q "^solver      heuristic" "$work/h.txt" || fail "no solver line for --solver heuristic"
grep -q "^plan cache  off" "$work/h.txt" || fail "KARMA_PLAN_CACHE=off does not turn the cache off"

"$kt" simulate "$vgg" --pressure 2 --strategy karma --solver ilp "${limit[@]}" --plan-cache "$work/cache" --json \
  >"$work/a.json" || fail "simulate --solver ilp"
check "d['feasible'] and d['solver']['kind'] == 'ilp' and d['solver']['solves'] > 0 and d['plan_cache']['stored']" \
  "$work/a.json" || fail "first ilp run: $(head -c 600 "$work/a.json")"
check "d['solver']['optimal'] > 0 and d['iteration_ms'] <= d['solver']['heuristic_ms'] * (1 + 1e-9)" \
  "$work/a.json" || fail "no GLPK solution, or the ilp plan is slower than the heuristic's"
[[ $(ls "$work/cache" | wc -l) == 1 ]] || fail "the cache holds $(ls "$work/cache" | wc -l) files, expected 1"

# The second run with the same inputs loads the plan: same figures, nothing solved.
KARMA_PLAN_CACHE="$work/cache" "$kt" simulate "$vgg" --pressure 2 --strategy karma --solver ilp "${limit[@]}" \
  >"$work/b.txt" || fail "second run"
grep -q "^plan cache  hit: loaded $work/cache/" "$work/b.txt" || fail "second run: $(cat "$work/b.txt")"
grep -q "^solver " "$work/b.txt" && fail "second run solved again"
KARMA_PLAN_CACHE="$work/cache" "$kt" simulate "$vgg" --pressure 2 --strategy karma "${limit[@]}" --json \
  >"$work/b.json" || fail "second run, json"
python3 - "$work/a.json" "$work/b.json" <<'PY' || fail "the cached plan simulates differently"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(0 if b["plan_cache"]["hit"] and abs(a["iteration_ms"] - b["iteration_ms"]) < 1e-9 else 1)
PY
# Other inputs (capacity): another entry.
"$kt" simulate "$vgg" --pressure 3 --strategy karma --solver ilp "${limit[@]}" --plan-cache "$work/cache" \
  >"$work/c.txt" || fail "k=3"
grep -q "^plan cache  stored" "$work/c.txt" || fail "k=3 loaded the plan made for k=2"

"$kt" compare "$resnet" --pressure 3 --solver heuristic >"$work/cmp.txt" || fail "compare --solver"
grep -q "^karma " "$work/cmp.txt" && grep -q "^solver      heuristic" "$work/cmp.txt" || fail "compare output"
"$kt" plan "$resnet" --pressure 3 --solver heuristic >"$work/plan.txt" || fail "plan --solver"
grep -q "^solver      heuristic" "$work/plan.txt" || fail "plan output"
"$kt" simulate "$resnet" --solver magic >/dev/null 2>&1 && fail "an unknown solver was accepted"

cli_finish
echo "ok   solver CLI"
