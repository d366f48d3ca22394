#!/usr/bin/env bash
# Runs karma-trace on each case of cases.txt and compares its output (and files it writes) with expected/.
# KARMA_UPDATE_GOLDEN=1 rewrites expected/ instead; review the diff before committing it.
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
IN=$here/inputs
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fail=0
while IFS='|' read -r name args; do
  name=$(echo "$name" | xargs)
  [[ -z $name || $name == \#* ]] && continue
  args=${args//\$IN/$IN}
  args=${args//\$OUT/$OUT}
  rm -rf "${OUT:?}"/*
  # shellcheck disable=SC2086
  actual=$(env -i PATH="$PATH" "$bin" $args 2>&1; echo "exit $?")
  actual=${actual//$IN/<IN>}
  actual=${actual//$OUT/<OUT>}
  expected_file=$here/expected/$name.txt
  for f in "$OUT"/*; do
    [[ -f $f ]] && actual+=$'\n'"--- file $(basename "$f")"$'\n'"$(cat "$f")"
  done
  if [[ ${KARMA_UPDATE_GOLDEN:-0} == 1 ]]; then
    printf '%s\n' "$actual" >"$expected_file"
    echo "updated $name"
  elif ! diff -u "$expected_file" <(printf '%s\n' "$actual") >"$OUT.diff" 2>&1; then
    echo "FAIL $name"
    cat "$OUT.diff"
    fail=1
  else
    echo "ok   $name"
  fi
  rm -f "$OUT.diff"
done <"$here/cases.txt"
exit $fail
