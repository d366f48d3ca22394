# Shared preamble of the karma-trace command-line tests (sourced): a scratch directory removed at exit, failure
# counting and a JSON predicate. The sourcing script reads its own arguments; it ends with `cli_finish`.

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# check EXPR FILE: evaluates the Python expression EXPR with d = the JSON object in FILE; non-zero when false.
check() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$2"; }

# cli_finish: the script's exit status, 1 when anything failed.
cli_finish() {
  if ((fails == 0)); then return 0; fi
  echo "$fails failure(s)"
  exit 1
}
