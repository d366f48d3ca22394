# Shared preamble of the test scripts that run programs on simcuda (sourced after setting `src`, the source tree,
# and `build`, the build tree): a scratch directory removed at exit, `fail`, and helpers around scripts/simrun.

# (scripts/simrun --karma itself lets a sanitized libkarma.so be preloaded ahead of the ASan runtime.)
simrun=("$src/scripts/simrun" --build "$build")
bin=$build/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# run NAME SIMRUN_OPTIONS... -- APP ARGS...: stdout to $tmp/NAME.out, stderr to $tmp/NAME.err, status in $rc;
# what libkarma.so records goes to $tmp/traces unless KARMA_TRACE_DIR says otherwise.
run() {
  local name=$1
  shift
  KARMA_TRACE_DIR=${KARMA_TRACE_DIR:-$tmp/traces} "${simrun[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
}

# results NAME: the losses and the checksum of a run, everything but the virtual milliseconds.
results() { sed -E 's/ ms [0-9.]+$//' "$tmp/$1.out"; }

# steady_ms NAME: the steady-state virtual time of a run, the fastest of its last three iterations. Under
# libkarma.so, Planner II's plan replaces the first one after a host-time delay (GLPK runs beside the application)
# and the iteration that validates its recomputes is slow (copies and checks): on a busy machine that iteration can
# be the last one, and the run's steady time is then the one before it.
steady_ms() { grep '^iter' "$tmp/$1.out" | tail -3 | sed -E 's/.* ms ([0-9.]+)$/\1/' | sort -g | head -1; }
