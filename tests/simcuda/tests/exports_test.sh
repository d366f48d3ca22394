#!/usr/bin/env bash
# simcuda's libraries export exactly the real libraries' functions, under the real sonames and version nodes.
#   exports_test.sh LIBDIR SYMBOLS_DIR CUDA_ROOT
set -euo pipefail
libdir=$1 symbols=$2 cuda=$3
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name version  for every function a library defines
defined() { objdump -T "$1" | awk '$3=="DF" && $4!="*UND*" {print $NF, $(NF-1)}' | sort -u; }

check() {
  local soname=$1 node=$2 lib="$libdir/$1"
  [[ -f $lib ]] || { echo "FAIL: $lib is missing"; fail=1; return; }
  local got
  got=$(objdump -p "$lib" | awk '$1=="SONAME" {print $2}')
  [[ $got == "$soname" ]] || { echo "FAIL: $lib has soname '$got'"; fail=1; }
  defined "$lib" >"$tmp/defined"
  awk '{print $1}' "$tmp/defined" >"$tmp/names"
  if ! diff -q "$tmp/names" "$symbols/$soname.txt" >/dev/null; then
    echo "FAIL: $soname exports differ from symbols/$soname.txt:"
    diff "$tmp/names" "$symbols/$soname.txt" | head -10
    fail=1
  fi
  if [[ -n $node ]]; then
    local wrong
    wrong=$(awk -v n="$node" '$2!=n' "$tmp/defined" | head -5)
    [[ -z $wrong ]] || { echo "FAIL: $soname functions outside version node $node:"; echo "$wrong"; fail=1; }
  elif readelf -V "$lib" | grep -q "Version definition"; then
    echo "FAIL: $soname defines symbol versions; the real one has none"
    fail=1
  fi
}

check libcudart.so.13 libcudart.so.13
check libcublas.so.13 libcublas.so.13
check libcudnn.so.9 libcudnn.so.9
check libcuda.so.1 ""

# The lists must still be those of the toolkit installed here (regenerate with symbols/update.sh).
for real in "$cuda/lib64/libcudart.so.13:libcudart.so.13" "$cuda/lib64/libcublas.so.13:libcublas.so.13" \
            "$cuda/lib64/libcudnn.so.9:libcudnn.so.9" \
            "$cuda/lib64/stubs/libcuda.so:libcuda.so.1"; do
  path=${real%%:*} soname=${real##*:}
  [[ -f $path ]] || { echo "note: $path not found; not compared"; continue; }
  defined "$path" | awk '{print $1}' >"$tmp/real"
  if ! diff -q "$tmp/real" "$symbols/$soname.txt" >/dev/null; then
    echo "FAIL: symbols/$soname.txt is not the export list of $path"
    fail=1
  fi
done

[[ $fail == 0 ]] && echo "exports: all four libraries match"
exit $fail
