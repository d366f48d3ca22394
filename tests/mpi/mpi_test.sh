#!/usr/bin/env bash
# Data-parallel tests on one machine: the shim's MPI semantics at 2 and 4 ranks, the trainer apps' --mpi mode
# under KARMA at twice the device memory against single-process references, phasing, and failing ranks.
#   mpi_test.sh SOURCE_DIR BUILD_DIR CASE [MEM]     MEM: simulated device memory of the app runs (32MiB)
set -uo pipefail
src=$1 build=$2 case=$3 mem=${4:-32MiB}
source "$(dirname "${BASH_SOURCE[0]}")/../common/sim_lib.sh"
shim=$build/lib/libkarma_mpi.so
# What the ranks preload. In a sanitizer build the shim needs the sanitizer runtimes loaded first, also in the
# uninstrumented shells between mpirun and the program.
preload=$shim
runtimes=$(ldd "$shim" | awk '/lib(asan|ubsan)\.so/ {print $3}' | tr '\n' ':')
[[ -z $runtimes ]] || preload=$runtimes$shim

# Shared memory only (no network in a container); no single-copy mechanism (CMA needs ptrace rights).
export OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_orte_base_help_aggregate=0
export KARMA_HOSTOPT_THREADS=1  # one optimizer thread per rank: the ranks share two cores
export KARMA_TRACE_DIR=$tmp/traces  # what libkarma.so records
mpirun_args=(--oversubscribe)
[[ $(id -u) == 0 ]] && mpirun_args+=(--allow-run-as-root)

# mpi NP NAME [ENV=VALUE...] -- CMD ARGS...: NP ranks under the shim, rank r's stdout in $tmp/NAME.r, everything
# else in $tmp/NAME.log, the status in $rc, the seconds in $secs.
mpi() {
  local np=$1 name=$2
  shift 2
  local env=(-x "LD_PRELOAD=$preload")
  while [[ $1 != -- ]]; do env+=(-x "$1"); shift; done
  shift
  local t0=$SECONDS
  timeout 250 mpirun "${mpirun_args[@]}" -np "$np" "${env[@]}" \
    sh -c 'exec "$@" >"'"$tmp/$name"'.$OMPI_COMM_WORLD_RANK"' sh "$@" >"$tmp/$name.log" 2>&1
  rc=$?
  secs=$((SECONDS - t0))
}

# An app under KARMA on simcuda at twice its device memory (the model's ideal peak is 2x --mem).
app_args() { echo --iters 4 --size-factor 2; }
simrun=("$src/scripts/simrun" --build "$build" --karma --mem "$mem")

# The lines every rank and the reference must agree on: losses (not the virtual times) and the checksum.
results() { sed -E 's/ ms [0-9.]+$//' "$1"; }

same_as_reference() {  # NAME NP REFERENCE_FILE
  for ((r = 0; r < $2; ++r)); do
    [[ -s $tmp/$1.$r ]] || fail "rank $r printed nothing: $(tail -5 "$tmp/$1.log")"
    diff <(results "$tmp/$1.$r") <(results "$3") >/dev/null ||
      fail "rank $r differs from the single-process run: $(diff <(results "$tmp/$1.$r") <(results "$3"))"
  done
  echo "$1: $2 ranks equal to the single-process run on the combined batch: $(tail -1 "$3")"
}

case $case in
shim_np2 | shim_np4)
  np=${case#shim_np}
  # Without the shim: the check itself is valid for Open MPI (results within rounding of the rank-order sum).
  timeout 120 mpirun "${mpirun_args[@]}" -np "$np" "$build/tests/mpi_shim_check" >"$tmp/plain.log" 2>&1 ||
    fail "plain Open MPI: $(tail -20 "$tmp/plain.log")"
  # With it: bit for bit, with the measured cost model, then with a start-up cost that merges whole rounds. Whether
  # the measured model merges depends on this machine's timing (a busy or sanitized run measures other costs), so
  # only the given cost must merge.
  for cost in "" "100000,1"; do
    expect=()
    [[ -n $cost ]] && expect=(--expect-merge)
    mpi "$np" check "KARMA_MPI_COST=$cost" -- "$build/tests/mpi_shim_check" "${expect[@]}"
    [[ $rc == 0 ]] || fail "KARMA_MPI_COST='$cost': exit $rc: $(tail -20 "$tmp/check.log") $(cat "$tmp"/check.*)"
    grep -q '^ok$' "$tmp/check.0" || fail "no ok: $(cat "$tmp/check.0")"
    grep '^shim:' "$tmp/check.0"
  done
  ;;

inert)
  # Loaded into a program that never initializes MPI, the shim changes nothing; it links no MPI library.
  ! ldd "$shim" | grep -q libmpi || fail "libkarma_mpi.so links libmpi"
  exports=$(nm -D --defined-only "$shim" | awk '{print $3}' | sort | tr '\n' ' ')
  for f in MPI_Init MPI_Init_thread MPI_Finalize MPI_Allreduce MPI_Iallreduce MPI_Wait MPI_Waitall MPI_Test \
    karma_dp_attach_optimizer karma_dp_get_stats karma_optimizer_create karma_optimizer_step; do
    grep -qw "$f" <<<"$exports" || fail "$f is not exported: $exports"
  done
  ! grep -Eq '(^| )_Z' <<<"$exports" || fail "C++ symbols are exported: $exports"
  "$src/scripts/simrun" --build "$build" --mem 64MiB -- "$bin/mlp_trainer" --iters 2 --size-factor 0.25 >"$tmp/a" 2>/dev/null
  LD_PRELOAD=$preload "$src/scripts/simrun" --build "$build" --mem 64MiB -- "$bin/mlp_trainer" --iters 2 \
    --size-factor 0.25 >"$tmp/b" 2>/dev/null || fail "a non-MPI program with the shim preloaded failed"
  diff "$tmp/a" "$tmp/b" >/dev/null || fail "the shim changed a non-MPI program's output"
  # KARMA_MPI=0: everything passes through (the check then runs in its tolerant mode).
  mpi 2 off KARMA_MPI=0 -- "$build/tests/mpi_shim_check"
  [[ $rc == 0 ]] || fail "KARMA_MPI=0: exit $rc: $(tail -20 "$tmp/off.log")"
  ! grep -q '^shim:' "$tmp/off.0" || fail "KARMA_MPI=0 still ran the shim"
  ;;

equal_mlp)
  "${simrun[@]}" -- "$bin/mlp_trainer" $(app_args) --shards 2 >"$tmp/ref" 2>"$tmp/ref.err" || fail "reference: $(cat "$tmp/ref.err")"
  mpi 2 dp -- "${simrun[@]}" -- "$bin/mlp_trainer_mpi" $(app_args) --mpi
  [[ $rc == 0 ]] || fail "exit $rc: $(tail -20 "$tmp/dp.log")"
  same_as_reference dp 2 "$tmp/ref"
  ;;

equal_skipnet)
  "${simrun[@]}" -- "$bin/skipnet_trainer" $(app_args) --shards 4 >"$tmp/ref" 2>"$tmp/ref.err" || fail "reference: $(cat "$tmp/ref.err")"
  mpi 4 dp -- "${simrun[@]}" -- "$bin/skipnet_trainer_mpi" $(app_args) --mpi
  [[ $rc == 0 ]] || fail "exit $rc: $(tail -20 "$tmp/dp.log")"
  same_as_reference dp 4 "$tmp/ref"
  ;;

launcher)
  # `karma run --ranks 2`: mpirun with libkarma.so and libkarma_mpi.so preloaded in every rank, as equal_mlp.
  "${simrun[@]}" -- "$bin/mlp_trainer" $(app_args) --shards 2 >"$tmp/ref" 2>"$tmp/ref.err" || fail "reference: $(cat "$tmp/ref.err")"
  margs=()
  for a in "${mpirun_args[@]}" --output-filename "$tmp/ranks"; do margs+=("--mpi-arg=$a"); done
  # What the preload needs first in a sanitizer build; karma run appends its libraries after it.
  LD_PRELOAD=${runtimes%:} timeout 250 "$src/scripts/simrun" --build "$build" --mem "$mem" -- "$build/bin/karma" run \
    --ranks 2 "${margs[@]}" -- "$bin/mlp_trainer_mpi" $(app_args) --mpi >"$tmp/dp.log" 2>&1
  rc=$?
  [[ $rc == 0 ]] || fail "exit $rc: $(tail -20 "$tmp/dp.log")"
  for r in 0 1; do cp "$tmp/ranks/1/rank.$r/stdout" "$tmp/dp.$r" 2>/dev/null; done
  same_as_reference dp 2 "$tmp/ref"
  grep -q "^karma: mode auto.*plan " "$tmp/ranks/1/rank.0/stderr" ||
    fail "rank 0 replayed no plan: $(cat "$tmp/ranks/1/rank.0/stderr")"
  ;;

host_updates)
  # The paper's pipeline: each layer's gradient reduced, its parameters updated on the host by the shim, the
  # pages of gradients, parameters and momentum moved to the host first and the parameters back after. Layers
  # of 4 MiB (whole pages at any granule). A fixed size whatever MEM: a 40 MiB footprint (36 MiB of
  # weights, gradients and momentum, a small batch) on a 20 MiB device, so that one layer's 12 MiB fit on it (on
  # a smaller device they are on the host already and there is nothing to move), and fast under the sanitizers.
  args=(--iters 2 --footprint 40MiB --width 1024 --depth 3 --host-optimizer)
  small=("$src/scripts/simrun" --build "$build" --karma --mem 20MiB)
  LD_PRELOAD=$preload "${small[@]}" -- "$bin/mlp_trainer" "${args[@]}" --shards 2 >"$tmp/ref" 2>"$tmp/ref.err" ||
    fail "reference: $(cat "$tmp/ref.err")"
  mpi 2 dp -- "${small[@]}" --stats "$tmp/stats.json" -- "$bin/mlp_trainer_mpi" "${args[@]}" --mpi
  [[ $rc == 0 ]] || fail "exit $rc: $(tail -20 "$tmp/dp.log")"
  same_as_reference dp 2 "$tmp/ref"
  # Each rank wrote the statistics file at exit; either will do.
  stat() { grep "\"$1\"" "$tmp/stats.json" | sed -E 's/.*: *([0-9.eE+-]+),?/\1/'; }
  to_host=$(stat prefetched_to_host_bytes) to_device=$(stat prefetched_bytes)
  echo "simcuda: $to_host bytes prefetched to the host, $to_device back to the device"
  # 2 iterations x 3 layers x a 4 MiB weight: every updated weight went back.
  ((to_device >= 2 * 3 * (4 << 20))) || fail "parameters were not prefetched back: $to_device bytes"
  ((to_host >= to_device)) || fail "gradients and state were not moved to the host: $to_host bytes"
  ;;

phasing)
  "${simrun[@]}" -- "$bin/mlp_trainer" --iters 5 --size-factor 2 --shards 2 >"$tmp/ref" 2>"$tmp/ref.err" ||
    fail "reference: $(cat "$tmp/ref.err")"
  LD_PRELOAD=$preload "${simrun[@]}" -- "$bin/mlp_trainer" --iters 5 --size-factor 2 --shards 2 --host-optimizer \
    >"$tmp/ref_host" 2>"$tmp/ref.err" || fail "reference with host updates: $(cat "$tmp/ref.err")"
  # The measured cost model, then a start-up cost of 20 ms (a slow network) that merges layers into phases; then
  # the paper's pipeline with host updates (libkarma.so serving the shim's memory hooks), whose first group must
  # be on the host, reduced and updated before the backward pass ends.
  # The merge plan comes from the calls' arrival times in host time: when other processes take the cores, a rank
  # can be held back long enough that its gradients arrive in one burst, and merging them all into one group is
  # then the rule's right answer, with nothing left to overlap. So the timing checks get up to three runs; the
  # results must equal the reference in every run.
  for run in measured 20000,1 host; do
    cost=${run/measured/} extra=() ref=$tmp/ref check=()
    if [[ $run == host ]]; then
      cost="" extra=(--host-optimizer) ref=$tmp/ref_host check=(host)
    fi
    for attempt in 1 2 3; do
      mpi 2 dp "KARMA_MPI_TIMELINE=$tmp/shim-%r.json" "KARMA_MPI_COST=$cost" -- "${simrun[@]}" -- \
        "$bin/mlp_trainer_mpi" --iters 5 --size-factor 2 --mpi --timeline "$tmp/app-%r.json" "${extra[@]}"
      [[ $rc == 0 ]] || fail "exit $rc: $(tail -20 "$tmp/dp.log")"
      same_as_reference dp 2 "$ref"
      /usr/bin/python3 "$src/tests/mpi/check_phasing.py" "$tmp" 2 "${cost:-measured}" "${check[@]}" && break
      ((attempt < 3)) || fail "phasing ($run) in three runs"
      echo "phasing ($run): run $attempt did not show it; running again"
    done
  done
  ;;

replay_mlp | replay_skipnet | replay_wide | replay_mlp_np4 | replay_skipnet_np4)
  # The data-parallel apps wait for each layer's gradient before exchanging it, so every layer of the backward
  # pass synchronizes and looks like an iteration to detection; once its replay keeps diverging it is rejected and
  # the iteration is found (IterationDetector::Reject). Each rank then replays a plan at 3x its device memory that
  # keeps the gradients the shim exchanges and the parameters it updates off the device between iterations
  # (libkarma.so serves the shim's memory hooks): results equal to the N-shard single-process run, and a steady
  # virtual iteration (median of the last 4) within 1.15x of one process at the same per-rank batch (24 iterations:
  # Planner II's plan is on trial against the first one, and the runtime may go back to that). `wide`: an mlp
  # of 1.56 MiB layers on a 16 MiB device, whose gradients and parameters have whole pages of their own that the
  # plan's moves carry (the others' share their pages with other buffers, which stay on the device). `_np4`: four
  # ranks on the two cores (--oversubscribe), against the 4-shard run, over 40 iterations.
  np=2
  [[ $case == *_np4 ]] && np=4
  app=${case%_np4}
  app=${app#replay_}_trainer
  m=64MiB
  [[ $mem == 8MiB ]] && m=8MiB  # sanitizer builds
  replay=("$src/scripts/simrun" --build "$build" --gpu h100-80g --karma --mem "$m")
  args=(--iters 24 --size-factor 3 --alloc async --host-optimizer)
  # Four ranks on two cores plan (on their workers, in wall-clock time) while the others run: their plans and
  # trials start more iterations later.
  [[ $np == 4 ]] && args[1]=40
  if [[ $case == replay_wide ]]; then
    app=mlp_trainer
    if [[ $m == 8MiB ]]; then
      # Sanitizer builds: fewer and smaller GEMMs (at 3x this case alone takes 300 s there).
      args=(--iters 16 --size-factor 2 --alloc async --host-optimizer --width 640 --depth 2)
    else
      m=16MiB
      args+=(--width 640 --depth 4)
    fi
    replay=("$src/scripts/simrun" --build "$build" --gpu h100-80g --karma --mem "$m")
  fi
  steady() { grep -E '^iter ' "$1" | tail -4 | awk '{print $NF}' | sort -n | awk '{a[NR]=$1} END {print (a[2]+a[3])/2}'; }
  LD_PRELOAD=$preload "${replay[@]}" -- "$bin/$app" "${args[@]}" --shards "$np" >"$tmp/ref" 2>"$tmp/ref.err" ||
    fail "reference: $(cat "$tmp/ref.err")"
  LD_PRELOAD=$preload "${replay[@]}" -- "$bin/$app" "${args[@]}" >"$tmp/one" 2>"$tmp/one.err" ||
    fail "one process: $(cat "$tmp/one.err")"
  mpi "$np" dp KARMA_LOG=info -- "${replay[@]}" -- "$bin/${app}_mpi" "${args[@]}" --mpi
  [[ $rc == 0 ]] || fail "exit $rc: $(tail -20 "$tmp/dp.log")"
  same_as_reference dp "$np" "$tmp/ref"
  # Planner II's plan is saved over the first plan's file; where its trial went back, the first plan is saved
  # again, so that a later run with these inputs reuses the faster plan.
  if grep -q "^karma: planner II's plan replays at .*: going back to that plan" "$tmp/dp.log"; then
    for plan in $(grep -o '^karma: planned on .*; plan [^ ]*\.plan\.json' "$tmp/dp.log" | sed 's/.*; plan //' | sort -u); do
      grep -q '"note": *"ILP' "$plan" && fail "the plan gone back to was not saved again: $plan holds planner II's"
    done
    echo "planner II's plan was slower: the first plan saved again"
  fi
  homed=$(grep -o 'data parallel: the plan keeps the [0-9]* buffers .* in pages of their own)' "$tmp/dp.log" | tail -1)
  [[ -n $homed ]] || fail "no plan homed the shim's buffers on the host: $(grep -E 'planned|libkarma_mpi' "$tmp/dp.log")"
  echo "$homed"
  ops=$(grep -o 'iterations ([0-9]* ops each)' "$tmp/dp.log" | awk '{print $2}' | tr -d '(' | sort -n | head -1)
  one_ops=$(grep -o 'iterations ([0-9]* ops each)' "$tmp/one.err" | awk '{print $2}' | tr -d '(')
  [[ -n $ops && $ops == "$one_ops" ]] || fail "the ranks detected iterations of '${ops:-no}' ops, one process of $one_ops"
  one=$(steady "$tmp/one")
  for ((r = 0; r < np; ++r)); do
    t=$(steady "$tmp/dp.$r")
    awk -v t="$t" -v one="$one" 'BEGIN {exit !(t <= 1.15 * one)}' ||
      fail "rank $r: $t ms per iteration, more than 1.15x one process's $one ms"
    echo "rank $r: $t ms per steady iteration, one process $one ms ($(awk -v t="$t" -v one="$one" 'BEGIN {printf "%.3f", t / one}')x), iterations of $ops ops"
  done
  # Each rank's device memory in steady replay within its budget (the exit summary's sampled figure): the plan
  # has the budget less the pages it cannot move (UnmovableBytes: the small buffers the apps keep share theirs).
  # Not on the 8 MiB of sanitizer builds: there mlp's ranks fill the device (8.00 MiB against 7.2), the replay up
  # to 2.82 MiB above the plan's bytes at one op (docs/runtime-e2e.md).
  if [[ $m != 8MiB ]]; then
    held=$(grep -o '[0-9.]* [KMG]iB in steady replay .* vs [0-9.]* [KMG]iB budget' "$tmp/dp.log" |
      awk 'function b(v, u) { return v * (u == "KiB" ? 1024 : u == "MiB" ? 1048576 : 1073741824) }
           { printf "%s %s within %s %s: %s\n", $1, $2, $(NF - 2), $(NF - 1),
                    (b($1, $2) <= b($(NF - 2), $(NF - 1))) ? "yes" : "no" }')
    [[ $(grep -c ': yes$' <<<"$held") == "$np" ]] || fail "device memory beyond the budget: $held"
    echo "device memory in steady replay, per rank: ${held//$'\n'/; }"
  fi
  ;;

rank_dies)
  # A rank aborts in the middle of a backward pass: Open MPI's launcher kills the others at once.
  mpi 2 dies -- "${simrun[@]}" -- "$bin/mlp_trainer_mpi" $(app_args) --mpi --fail abort
  echo "abort: exit $rc after $secs s"
  [[ $rc != 0 && $rc != 124 ]] || fail "exit $rc: the job did not fail, or hung: $(tail -20 "$tmp/dies.log")"
  grep -q "exited on signal 6" "$tmp/dies.log" || fail "no clear message: $(tail -20 "$tmp/dies.log")"
  ((secs < 60)) || fail "took $secs s"
  # A rank exits where the launcher does not stop the job for it: the shim's watchdog does.
  OMPI_MCA_orte_abort_on_non_zero_status=0 mpi 2 exits KARMA_MPI_TIMEOUT=3 -- "${simrun[@]}" -- \
    "$bin/mlp_trainer_mpi" $(app_args) --mpi --fail exit
  echo "exit without the launcher's help: exit $rc after $secs s"
  [[ $rc == 70 ]] || fail "exit $rc, expected the watchdog's 70: $(tail -20 "$tmp/exits.log")"
  grep -q "has not completed after 3 s (KARMA_MPI_TIMEOUT): another rank has probably died" "$tmp/exits.log" ||
    fail "no clear message: $(tail -20 "$tmp/exits.log")"
  ((secs < 60)) || fail "took $secs s"
  ;;

rank_hangs)
  # A rank stops (SIGSTOP) in the middle of a backward pass: neither dead nor progressing.
  mpi 2 hangs KARMA_MPI_TIMEOUT=3 -- "${simrun[@]}" -- "$bin/mlp_trainer_mpi" $(app_args) --mpi --fail hang
  echo "stopped rank: exit $rc after $secs s"
  [[ $rc == 70 ]] || fail "exit $rc, expected the watchdog's 70: $(tail -20 "$tmp/hangs.log")"
  grep -q "rank 0 of 2: the allreduce of group .* has not completed after 3 s" "$tmp/hangs.log" ||
    fail "no clear message: $(tail -20 "$tmp/hangs.log")"
  ((secs < 60)) || fail "took $secs s"
  ;;

*)
  fail "unknown case $case"
  ;;
esac
echo "ok: $case"
