#!/usr/bin/env bash
# Command-line contract of karma-trace simulate, compare and plan: JSON keys and figures, capacity forms, plan
# files that round-trip, pictures, and exit codes on bad input.
# Usage: planner_cli_test.sh KARMA_TRACE DATA_DIR CASE
set -uo pipefail
kt=$1
data=$2
case_name=$3
source "$(dirname "${BASH_SOURCE[0]}")/../common/cli_lib.sh"
# Plans are planned afresh (no plan cache under $HOME) in every case.
export KARMA_PLAN_CACHE=off
resnet=$data/workloads/resnet50-b128.json

expect_exit() {
  local want=$1 what=$2
  shift 2
  "$@" >"$work/out" 2>"$work/err"
  local code=$?
  if ((code != want)); then
    fail "$what: exit code $code, expected $want ($(head -c 200 "$work/err"))"
  elif ((want != 0)) && [[ ! -s $work/err ]]; then
    fail "$what: no message on stderr"
  else
    echo "ok   $what (exit $code)"
  fi
}

case $case_name in
  simulate_json)
    "$kt" simulate "$resnet" --gpu v100-16g-pcie3 --pressure 2 --strategy karma --json >"$work/k.json" || fail "simulate karma"
    for key in strategy feasible iteration_ms ideal_ms stall_ms swap_in_bytes swap_out_bytes recompute_ms peak_bytes; do
      check "'$key' in d" "$work/k.json" || fail "simulate --json lacks $key"
    done
    check "d['feasible'] and d['strategy'] == 'karma'" "$work/k.json" || fail "karma is not feasible at k=2"
    check "abs(d['ideal_ms'] - 325.9) < 0.05" "$work/k.json" || fail "ideal_ms of resnet50-b128 is not 325.9"
    check "d['iteration_ms'] >= d['ideal_ms'] and d['peak_bytes'] <= d['capacity_bytes']" "$work/k.json" ||
      fail "karma faster than in-core or above capacity"
    "$kt" simulate "$resnet" --pressure 2 --strategy incore --json >"$work/i.json" || fail "simulate incore"
    check "d['feasible'] is False and 'needs' in d['reason']" "$work/i.json" || fail "incore at k=2 should be infeasible with a reason"
    echo "ok   simulate --json: $(python3 -c "import json; d=json.load(open('$work/k.json')); print(round(d['iteration_ms'],1), 'ms vs', round(d['ideal_ms'],1))")"
    ;;

  capacity_forms)
    # 5.31 GiB given as a unit, as plain bytes and as a fraction of the 16 GiB profile: the same plan.
    "$kt" simulate "$resnet" --capacity 5.5GiB --strategy capacity --json >"$work/a.json" || fail "unit capacity"
    "$kt" simulate "$resnet" --capacity 5905580032 --strategy capacity --json >"$work/b.json" || fail "plain bytes"
    "$kt" simulate "$resnet" --capacity 0.34375 --strategy capacity --json >"$work/c.json" || fail "fraction"
    for f in b c; do
      python3 -c "import json; a=json.load(open('$work/a.json')); b=json.load(open('$work/$f.json')); exit(a['capacity_bytes']!=b['capacity_bytes'] or a['iteration_ms']!=b['iteration_ms'])" ||
        fail "capacity form $f differs"
    done
    "$kt" simulate "$resnet" --strategy incore --json >"$work/d.json" || fail "default capacity"
    check "d['capacity_bytes'] == 16 * 2**30 and d['feasible']" "$work/d.json" || fail "default capacity is not the profile's 16 GiB"
    echo "ok   capacity forms"
    ;;

  plan_files)
    "$kt" simulate "$resnet" --pressure 3 --strategy karma --save-plan "$work/p.json" --json >"$work/s.json" || fail "save plan"
    check "d['format'] == 'karma-plan' and d['version'] == 2 and len(d['actions']) > 0" "$work/p.json" || fail "plan file"
    "$kt" simulate "$resnet" --pressure 3 --plan "$work/p.json" --json >"$work/r.json" || fail "simulate --plan"
    python3 -c "import json; a=json.load(open('$work/s.json')); b=json.load(open('$work/r.json')); exit(a['iteration_ms']!=b['iteration_ms'])" ||
      fail "a saved plan simulates differently"
    # The same plan at a smaller capacity is refused with a reason, not accepted.
    "$kt" simulate "$resnet" --pressure 5 --plan "$work/p.json" --json >"$work/t.json" || fail "simulate --plan at k=5"
    check "not d['feasible'] and d['reason']" "$work/t.json" || fail "a plan above capacity was accepted"
    echo "ok   plan files round-trip"
    ;;

  compare_plan_svg)
    "$kt" compare "$resnet" --pressure 2 >"$work/c.txt" || fail "compare"
    for s in incore um vdnn superneurons checkpoint capacity karma; do
      grep -q "^$s " "$work/c.txt" || fail "compare lacks $s"
    done
    "$kt" plan "$resnet" --pressure 2 --svg "$work/p.svg" >"$work/p.txt" || fail "plan"
    grep -q "F1 -> F2" "$work/p.txt" || fail "plan prints no stage notation"
    "$kt" plan "$resnet" --pressure 2 --strategy capacity >"$work/c.txt" || fail "plan --strategy capacity"
    grep -q "F2||S1out" "$work/c.txt" || fail "capacity-based swapping shows no swap-out beside a forward block"
    grep -q "<svg" "$work/p.svg" && grep -q "device memory in use" "$work/p.svg" && grep -q "host" "$work/p.svg" ||
      fail "the SVG lacks its lanes or memory plot"
    "$kt" plan "$resnet" --pressure 2 --strategy checkpoint --json >"$work/p.json" || fail "plan --json"
    check "'R1' in d['notation'] or 'R2' in d['notation']" "$work/p.json" || fail "checkpointing shows no recompute stage"
    echo "ok   compare, plan and its picture"
    ;;

  link)
    # --link replaces the profile's host link: a slower one makes swapping slower, the profile's own rates change
    # nothing, and plans and the plan cache tell the links apart.
    "$kt" simulate "$resnet" --pressure 3 --strategy capacity --json >"$work/n.json" || fail "nominal link"
    "$kt" simulate "$resnet" --pressure 3 --strategy capacity --link 6/3 --json >"$work/s.json" || fail "--link 6/3"
    "$kt" simulate "$resnet" --pressure 3 --strategy capacity --link 12 --json >"$work/same.json" || fail "--link 12"
    check "d['profile'] == 'v100-16g-pcie3 link 6/3 GB/s'" "$work/s.json" || fail "the profile does not name the link"
    check "d['profile'] == 'v100-16g-pcie3'" "$work/same.json" || fail "the profile's own rates are named as others"
    python3 -c "import json; n=json.load(open('$work/n.json')); s=json.load(open('$work/s.json')); m=json.load(open('$work/same.json'))
exit(not (s['iteration_ms'] > n['iteration_ms'] and m['iteration_ms'] == n['iteration_ms']))" ||
      fail "a slower link does not slow swapping, or the profile's rates change the plan"
    "$kt" simulate "$resnet" --pressure 3 --strategy karma --solver heuristic --link 6/3 --save-plan "$work/p.json" \
      >/dev/null || fail "save a plan for the link"
    check "d['profile'] == 'v100-16g-pcie3 link 6/3 GB/s'" "$work/p.json" || fail "the plan file does not name the link"
    "$kt" simulate "$resnet" --pressure 3 --plan "$work/p.json" --link 6/3 >"$work/out" 2>"$work/err" || fail "replay"
    ! grep -q "made for other inputs" "$work/err" || fail "the plan's own link is taken for other inputs"
    "$kt" simulate "$resnet" --pressure 3 --plan "$work/p.json" >"$work/out" 2>"$work/err" || fail "other link"
    grep -q "made for other inputs" "$work/err" || fail "a plan for another link is not told apart"
    mkdir -p "$work/cache"
    KARMA_PLAN_CACHE=$work/cache "$kt" simulate "$resnet" --pressure 3 --strategy karma --solver heuristic \
      --link 6/3 >/dev/null || fail "plan into the cache"
    KARMA_PLAN_CACHE=$work/cache "$kt" simulate "$resnet" --pressure 3 --strategy karma --solver heuristic \
      >"$work/out" || fail "plan for the profile's link"
    ! grep -q "plan cache  hit" "$work/out" || fail "the plan for another link came from the cache"
    expect_exit 1 "bad --link" "$kt" simulate "$resnet" --strategy karma --link fast
    grep -q -- "--link" "$work/err" || fail "the message does not name --link"
    echo "ok   --link: $(python3 -c "import json; print(json.load(open('$work/n.json'))['iteration_ms'], '->', json.load(open('$work/s.json'))['iteration_ms'])") ms"
    ;;

  bad_inputs)
    expect_exit 2 "unknown strategy" "$kt" simulate "$resnet" --strategy magic
    expect_exit 2 "--capacity with --pressure" "$kt" simulate "$resnet" --strategy karma --capacity 1GiB --pressure 2
    expect_exit 2 "no strategy and no plan" "$kt" simulate "$resnet"
    expect_exit 2 "um has no plan to print" "$kt" plan "$resnet" --strategy um
    expect_exit 1 "bad capacity" "$kt" simulate "$resnet" --strategy karma --capacity lots
    expect_exit 1 "unknown profile" "$kt" compare "$resnet" --gpu k80
    expect_exit 1 "missing file" "$kt" plan "$work/none.json"
    echo '{"format": "karma-plan", "version": 9}' >"$work/new.json"
    expect_exit 1 "newer plan version" "$kt" simulate "$resnet" --plan "$work/new.json"
    grep -q "version 9" "$work/err" || fail "the version message does not name the file's version"
    ;;

  data_parallel)
    # The paper's pipeline on a slow network (8 ranks, 2 ms start-up, 1 GB/s): exchanging each group of gradients
    # as the backward pass finishes it beats one exchange after it by at least 1.2x, on both shared workloads.
    for w in resnet50-b128 gpt2small-b8-s1024; do
      f=$data/workloads/$w.json
      "$kt" simulate "$f" --strategy karma --pressure 2 --save-plan "$work/$w.plan" --ranks 8 --network 2000,1 \
        --exchange phased --json >"$work/$w-phased.json" || fail "$w: simulate --ranks 8 --exchange phased"
      "$kt" simulate "$f" --pressure 2 --plan "$work/$w.plan" --ranks 8 --network 2000,1 --exchange end --json \
        >"$work/$w-end.json" || fail "$w: simulate --ranks 8 --exchange end"
      for key in iteration_ms one_rank_iteration_ms data_parallel; do
        check "'$key' in d" "$work/$w-phased.json" || fail "$w: simulate --ranks --json lacks $key"
      done
      check "d['data_parallel']['feasible'] and d['data_parallel']['groups'] > 1 and d['data_parallel']['exchange_hidden'] > 0.3" \
        "$work/$w-phased.json" || fail "$w: the phased exchange does not run beside the backward pass"
      check "d['data_parallel']['groups'] == 1 and d['data_parallel']['exchange_hidden'] == 0" "$work/$w-end.json" ||
        fail "$w: the exchange at the end is not one group after the backward pass"
      python3 -c "import json; p=json.load(open('$work/$w-phased.json')); e=json.load(open('$work/$w-end.json'))
exit(not (e['iteration_ms'] >= 1.2 * p['iteration_ms'] and p['iteration_ms'] >= p['data_parallel']['device_ms']))" ||
        fail "$w: phased is not 1.2x faster than the exchange at the end"
      echo "ok   $w, 8 ranks on 2000 us + 1 GB/s: $(python3 -c "import json; p=json.load(open('$work/$w-phased.json')); e=json.load(open('$work/$w-end.json')); print(f\"phased {p['iteration_ms']:.1f} ms, end {e['iteration_ms']:.1f} ms ({e['iteration_ms']/p['iteration_ms']:.2f}x), one rank {p['one_rank_iteration_ms']:.1f} ms\")")"
    done
    "$kt" plan "$resnet" --pressure 2 --solver heuristic --ranks 4 --network 50,10 --svg "$work/dp.svg" >"$work/plan.txt" ||
      fail "plan --ranks --svg"
    grep -q "exchange group" "$work/plan.txt" || fail "plan --ranks prints no pipeline"
    for lane in "gradients out" exchange "host update" "parameters in"; do
      grep -q ">$lane<" "$work/dp.svg" || fail "the picture has no '$lane' lane"
    done
    expect_exit 2 "--network without a bandwidth" "$kt" simulate "$resnet" --strategy capacity --ranks 2 --network 20
    expect_exit 2 "--exchange unknown" "$kt" simulate "$resnet" --strategy capacity --ranks 2 --exchange later
    expect_exit 2 "--ranks 0" "$kt" simulate "$resnet" --strategy capacity --ranks 0
    ;;

  *) echo "unknown case $case_name"; exit 2 ;;
esac
cli_finish
