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
