#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest.
#   scripts/test.sh                 build/ and all tests
#   scripts/test.sh --sanitize      the same in build-sanitize/ with ASan+UBSan
#   scripts/test.sh -- -L unit      extra arguments after -- go to ctest
set -euo pipefail
source "$(dirname "$0")/lib.sh"

dir="$KARMA_ROOT/build"
cmake_args=()
ctest_args=()
while (($#)); do
  case $1 in
    --sanitize) dir="$KARMA_ROOT/build-sanitize"; cmake_args+=(-DKARMA_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug) ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

"$KARMA_ROOT/scripts/setup.sh"
karma_build "$dir" "${cmake_args[@]}"
if [[ $dir == *sanitize ]]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
cd "$dir"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "${ctest_args[@]}"
