#!/usr/bin/env bash
# Command-line contract of `karma run`: the variables and command line it makes (--dry-run), bad values refused
# before anything starts, exit codes and signals passed through, a trainer at 3x the simulated device's memory
# under it, and the same from an installed prefix with nothing of the checkout on the paths.
#   run_test.sh SOURCE_DIR BUILD_DIR CASE [MEM]     MEM: simulated device memory of the trainer runs (32MiB)
set -uo pipefail
src=$1 build=$(cd "$2" && pwd) case=$3 mem=${4:-32MiB}
source "$src/tests/common/sim_lib.sh"
karma=$build/bin/karma
lib=$build/lib/libkarma.so
# In a sanitizer build the instrumented libkarma.so needs the sanitizer runtimes ahead of it in LD_PRELOAD (karma
# run appends after what is there), also in uninstrumented programs such as sh.
runtimes=$(ldd "$lib" | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
[[ -z $runtimes ]] || export LD_PRELOAD=$runtimes ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
footprint=$((3 * ${mem%MiB}))MiB
app_args=(--iters 6 --footprint "$footprint")

# dry NAME ARGS...: `karma run --dry-run ARGS`, its output in $tmp/NAME; fails unless it exits 0.
dry() {
  local name=$1
  shift
  "$karma" run --dry-run "$@" >"$tmp/$name" 2>"$tmp/$name.err" || fail "$name: exit $?: $(cat "$tmp/$name.err")"
}
has() { grep -qxF -- "$2" "$tmp/$1" || fail "$1: no line '$2' in: $(cat "$tmp/$1")"; }

case $case in
dry_run)
  preload=${runtimes:+$runtimes:}$lib
  dry plain -- python3 train.py --lr 0.1
  has plain "LD_PRELOAD=$preload"
  has plain "python3 train.py --lr 0.1"
  [[ $(wc -l <"$tmp/plain") == 2 ]] || fail "plain: only LD_PRELOAD and the command expected: $(cat "$tmp/plain")"
  dry options --capacity 12GiB --mode record --trace-dir rel/traces --log debug --residency copy --set KARMA_SOLVER=heuristic \
    --set KARMA_MOVE_THREADS=0 -- ./app 'an arg'
  has options "KARMA_CAPACITY=12GiB"
  has options "KARMA_MODE=record"
  has options "KARMA_TRACE_DIR=$PWD/rel/traces"
  has options "KARMA_LOG=debug"
  has options "KARMA_RESIDENCY=copy"
  has options "KARMA_SOLVER=heuristic"
  has options "KARMA_MOVE_THREADS=0"
  has options "./app 'an arg'"
  # A repeatable option just before -- takes one value: the command's own options stay the command's.
  dry vector --set KARMA_LOG=info -- ./app --iters 3
  has vector "./app --iters 3"
  dry fraction --capacity 0.5 -- ./app
  has fraction "KARMA_CAPACITY=0.5"
  # A command without -- is fine as long as it has no options of its own.
  dry bare python3 train.py
  has bare "python3 train.py"
  # What LD_PRELOAD holds stays, first; libkarma.so already there is not added twice.
  LD_PRELOAD=${preload%$lib}/usr/lib/x.so dry appended -- ./app
  has appended "LD_PRELOAD=${preload%$lib}/usr/lib/x.so:$lib"
  LD_PRELOAD=$preload dry twice -- ./app
  has twice "LD_PRELOAD=$preload"
  # --ranks: mpirun gets the variables (not the preload) itself and passes all of them, and what the environment
  # holds of KARMA_* and LD_LIBRARY_PATH, to the ranks; both libraries preloaded there.
  KARMA_HOSTOPT_THREADS=1 LD_LIBRARY_PATH=/opt/x dry ranks --ranks 2 --capacity 1GiB --mpi-arg=--oversubscribe \
    --mpirun /usr/bin/mpirun -- ./app --mpi
  has ranks "KARMA_CAPACITY=1GiB"
  has ranks "/usr/bin/mpirun --oversubscribe -np 2 -x LD_PRELOAD=$preload:$build/lib/libkarma_mpi.so -x KARMA_HOSTOPT_THREADS -x LD_LIBRARY_PATH -x KARMA_CAPACITY=1GiB ./app --mpi"
  "$karma" run --help | grep -q -- "--ranks" || fail "run --help does not list --ranks"
  echo "ok: the variables and command lines karma run makes"
  ;;

bad_values)
  # Each must exit 2 with a message and start nothing.
  bad() {
    rm -f "$tmp/started"
    "$karma" run "$@" touch "$tmp/started" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [[ $rc == 2 ]] || fail "karma run $*: exit $rc, expected 2"
    [[ -s $tmp/err ]] || fail "karma run $*: no message"
    [[ ! -e $tmp/started ]] || fail "karma run $*: the command started"
    echo "ok   karma run $*: $(head -1 "$tmp/err")"
  }
  bad --capacity 3PB --
  bad --capacity lots --
  bad --mode fast --
  bad --log loud --
  bad --residency pinned --
  bad --set KARMA_BATCH_MOVES=maybe --
  bad --set KARMA_NO_SUCH=1 --
  bad --set KARMA_MODE --
  bad --set KARMA_MODE=um --mode um --
  bad --ranks 0 --
  bad --no-such-option --
  KARMA_MODE=fast bad --
  KARMA_CAPACTIY=1GiB bad --
  mkdir -p "$tmp/elsewhere" && cp "$build/lib/libkarma_mpi.so" "$tmp/elsewhere/libkarma.so"
  LD_PRELOAD=${runtimes:+$runtimes:}$tmp/elsewhere/libkarma.so bad --
  "$karma" run >/dev/null 2>&1
  [[ $? == 2 ]] || fail "karma run without a command must exit 2"
  # An option meant for the command, given without --: refused, not passed on in another order.
  "$karma" run --dry-run python3 train.py --lr 1 >"$tmp/out" 2>"$tmp/err"
  [[ $? == 2 ]] && grep -q "put -- before the command" "$tmp/err" || fail "an option without --: $(cat "$tmp/err")"
  ;;

exit_codes)
  for summary in "" --summary; do
    "$karma" run $summary --trace-dir "$tmp/t" -- sh -c 'exit 7' 2>"$tmp/err"
    [[ $? == 7 ]] || fail "karma run $summary: the command's exit code 7 did not come back: $(cat "$tmp/err")"
    "$karma" run $summary --trace-dir "$tmp/t" -- sh -c 'kill -TERM $$' 2>"$tmp/err"
    [[ $? == 143 ]] || fail "karma run $summary: a command killed by SIGTERM must look so (143): $(cat "$tmp/err")"
  done
  # --summary looks where the command's libkarma.so writes: the environment's KARMA_TRACE_DIR when no option says.
  KARMA_TRACE_DIR=$tmp/from-env "$karma" run --summary -- true 2>"$tmp/err"
  grep -q "no iteration was recorded in $tmp/from-env during this run" "$tmp/err" ||
    fail "--summary did not look in the environment's KARMA_TRACE_DIR: $(cat "$tmp/err")"
  "$karma" run -- "$tmp/no-such-program" 2>/dev/null
  [[ $? == 127 ]] || fail "a command that does not exist: exit 127 expected"
  touch "$tmp/not-executable"
  "$karma" run -- "$tmp/not-executable" 2>/dev/null
  [[ $? == 126 ]] || fail "a command that cannot run: exit 126 expected"
  # The trainer made to fail (out of memory: KARMA off at 3x the device): its own exit code, plain and under karma.
  "${simrun[@]}" --mem "$mem" -- "$bin/mlp_trainer" "${app_args[@]}" >/dev/null 2>&1
  plain_rc=$?
  ((plain_rc != 0)) || fail "mlp_trainer at 3x without KARMA did not fail"
  "${simrun[@]}" --mem "$mem" -- "$karma" run --mode off -- "$bin/mlp_trainer" "${app_args[@]}" >/dev/null 2>&1
  [[ $? == "$plain_rc" ]] || fail "under karma run --mode off the trainer's exit code $plain_rc did not come back"
  echo "ok: exit codes 7, 143 (SIGTERM), 127, 126 and the trainer's own $plain_rc come back"
  ;;

simcuda)
  "${simrun[@]}" -- "$bin/mlp_trainer" "${app_args[@]}" >"$tmp/core.out" 2>"$tmp/core.err" ||
    fail "in core: $(cat "$tmp/core.err")"
  "${simrun[@]}" --mem "$mem" -- "$karma" run --trace-dir "$tmp/traces" --summary -- "$bin/mlp_trainer" \
    "${app_args[@]}" >"$tmp/karma.out" 2>"$tmp/karma.err" || fail "under karma run: exit $?: $(tail "$tmp/karma.err")"
  diff <(results core) <(results karma) >/dev/null ||
    fail "not the in-core results: $(diff <(results core) <(results karma))"
  grep -q "^karma: mode auto.*plan $tmp/traces/.*\.plan\.json" "$tmp/karma.err" ||
    fail "no plan was replayed: $(cat "$tmp/karma.err")"
  grep -q "^karma: 1 iteration(s) recorded in $tmp/traces during this run" "$tmp/karma.err" &&
    grep -q "^ideal peak  " "$tmp/karma.err" && grep -Eq '^ +karma on v100-16g-pcie3 for .*swap-outs' "$tmp/karma.err" ||
    fail "--summary printed no summary and plan: $(cat "$tmp/karma.err")"
  echo "ok: mlp_trainer at 3x $mem under karma run: $(tail -1 "$tmp/karma.out"), as in core"
  grep -A3 "during this run" "$tmp/karma.err"
  ;;

installed)
  prefix=$tmp/prefix
  cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || fail "cmake --install: $(cat "$tmp/install.log")"
  for f in bin/karma bin/karma-trace lib/libkarma.so lib/libkarma_mpi.so include/karma/karma.h \
    lib/python3/dist-packages/karma/__init__.py lib/cmake/karma/karmaConfig.cmake; do
    [[ -e $prefix/$f ]] || fail "the installed tree has no $f: $(cd "$prefix" && find . -type f)"
  done
  # simcuda stands in for the driver, and the trainer for the user's program: both copied out of the checkout.
  mkdir "$tmp/driver" "$tmp/app"
  cp -L "$build"/lib/simcuda/*.so* "$tmp/driver/"
  cp "$bin/mlp_trainer" "$tmp/app/"
  clean=(env -u LD_PRELOAD PATH="$prefix/bin:/usr/bin:/bin" LD_LIBRARY_PATH="$tmp/driver")
  [[ -n $runtimes ]] && clean+=(LD_PRELOAD="$runtimes")
  (cd "$tmp" && "${clean[@]}" karma run --dry-run -- ./app/mlp_trainer) >"$tmp/dry" || fail "installed dry run"
  grep -q "^LD_PRELOAD=.*$prefix/lib/libkarma.so$" "$tmp/dry" || fail "not the installed library: $(cat "$tmp/dry")"
  (cd "$tmp" && "${clean[@]}" ./app/mlp_trainer "${app_args[@]}") >"$tmp/core.out" 2>"$tmp/core.err" ||
    fail "in core: $(cat "$tmp/core.err")"
  (cd "$tmp" && "${clean[@]}" SIMCUDA_MEM="$mem" karma run --trace-dir traces -- ./app/mlp_trainer "${app_args[@]}") \
    >"$tmp/karma.out" 2>"$tmp/karma.err" || fail "installed karma run: exit $?: $(tail "$tmp/karma.err")"
  diff <(results core) <(results karma) >/dev/null ||
    fail "not the in-core results: $(diff <(results core) <(results karma))"
  grep -q "^karma: mode auto.*plan $tmp/traces/" "$tmp/karma.err" || fail "no plan replayed: $(cat "$tmp/karma.err")"
  "${clean[@]}" karma-trace summary "$(ls "$tmp"/traces/*.ktrace | head -1)" | grep -q "^ideal peak" ||
    fail "the installed karma-trace cannot read the recording"
  # The Python package finds the installed libkarma_mpi.so.
  # (Python's own allocations, under a sanitizer build's preloaded runtimes, are not ours to leak-check.)
  (cd "$tmp" && "${clean[@]}" ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 PYTHONPATH="$prefix/lib/python3/dist-packages" python3 -c \
    'import karma.capi as c; lib = c.load(); print(lib._name)') >"$tmp/py" 2>&1 || fail "python: $(cat "$tmp/py")"
  grep -qx "$prefix/lib/libkarma_mpi.so" "$tmp/py" || fail "python loaded another library: $(cat "$tmp/py")"
  # find_package(karma): karma.h and libkarma_mpi.so for a program of the user's.
  mkdir "$tmp/user"
  cat >"$tmp/user/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.22)
project(user C)
find_package(karma 0.1 REQUIRED)
add_executable(user user.c)
target_link_libraries(user PRIVATE karma::karma_mpi)
EOF
  cat >"$tmp/user/user.c" <<'EOF'
#include <karma/karma.h>
#include <stdio.h>
int main(void) {
  karma_dp_stats s;
  printf("karma %d.%d.%d, dp stats %d\n", KARMA_VERSION_MAJOR, KARMA_VERSION_MINOR, KARMA_VERSION_PATCH,
         karma_dp_get_stats(&s));
  return 0;
}
EOF
  (env -u LD_PRELOAD cmake -S "$tmp/user" -B "$tmp/user/build" -DCMAKE_PREFIX_PATH="$prefix" &&
    env -u LD_PRELOAD cmake --build "$tmp/user/build") >"$tmp/user.log" 2>&1 || fail "find_package: $(tail -20 "$tmp/user.log")"
  "${clean[@]}" "$tmp/user/build/user" >"$tmp/user.out" 2>&1 || fail "the user's program: $(cat "$tmp/user.out")"
  echo "ok: from $prefix alone: $(tail -1 "$tmp/karma.out") as in core; $(cat "$tmp/user.out")"
  ;;

*)
  fail "unknown case $case"
  ;;
esac
