#!/usr/bin/env bash
# Packs a built KARMA for a GPU machine that cannot build it (no package registry there: GLPK, fmt and the rest
# are missing): libkarma.so, the launcher karma (which finds it at ../lib) and karma-trace without their debug
# sections, the shared libraries they load beyond the C and C++ runtimes, and env.sh, which points the loader at
# those. The GPU suite then runs with
#   source OUT/env.sh && tests/gpu/run_gpu_suite.sh --skip-build --build OUT/build
# The machine needs a C library at least as new as the one this was built against.
set -euo pipefail

usage() { echo "usage: tests/gpu/bundle.sh [--build DIR] OUT   (DIR: the KARMA build, default build)"; }
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
out=""
while (($#)); do
  case $1 in
    --build) (($# >= 2)) || { usage >&2; exit 2; }; build=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "bundle: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) [[ -z $out ]] || { usage >&2; exit 2; }; out=$1 ;;
  esac
  shift
done
[[ -n $out ]] || { usage >&2; exit 2; }
lib=$build/lib/libkarma.so tool=$build/bin/karma-trace launcher=$build/bin/karma
for f in "$lib" "$tool" "$launcher"; do
  [[ -f $f ]] ||
    { echo "bundle: $f is missing: build KARMA first (targets karma, karma-trace and karma-launcher)" >&2; exit 1; }
done

mkdir -p "$out/build/lib" "$out/build/bin" "$out/deps"
strip_copy() {  # debug sections are most of the size, and the lent machine's copy has a size limit
  if command -v objcopy >/dev/null; then objcopy --strip-debug "$1" "$2"; else cp "$1" "$2"; fi
}
strip_copy "$lib" "$out/build/lib/libkarma.so"
strip_copy "$tool" "$out/build/bin/karma-trace"
strip_copy "$launcher" "$out/build/bin/karma"
# Every library the loader resolves for them, but the C and C++ runtimes and zlib, which the machine has (the C
# runtime must match its own loader; its Python may need a newer zlib than this one).
system() {
  case $1 in
    libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | ld-linux* | libpthread.so* | libdl.so* | librt.so* | libz.so*) ;;
    *) return 1 ;;
  esac
}
resolved() { ldd "$@" | sed -n 's/^[[:space:]]*\([^ ]*\) => \(\/[^ ]*\) .*/\1 \2/p' | sort -u; }
resolved "$lib" "$tool" "$launcher" | while read -r name path; do system "$name" || cp -L "$path" "$out/deps/$name"; done
# The probes (README.md), where this machine has the CUDA toolkit: move_costs (copies, VMM calls, launches; nvcc
# and libcuda only), and with CUPTI the managed-memory ones, um_costs and the injection library um_counters with the
# CUPTI it was built against.
cuda=${CUDA_HOME:-/usr/local/cuda}
tools=""
if [[ -x $cuda/bin/nvcc ]]; then
  mkdir -p "$out/tools"
  "$cuda/bin/nvcc" -O2 -std=c++17 -gencode 'arch=compute_90,code=[sm_90,compute_90]' -o "$out/tools/move_costs" \
    "$root/tests/gpu/move_costs.cu" -L"$cuda/lib64/stubs" -lcuda
  tools=", tools/move_costs"
fi
if [[ -x $cuda/bin/nvcc && -f $cuda/include/cupti.h ]]; then
  "$cuda/bin/nvcc" -O2 -std=c++17 -gencode 'arch=compute_90,code=[sm_90,compute_90]' -o "$out/tools/um_costs" \
    "$root/tests/gpu/um_costs.cu"
  "${CXX:-g++}" -std=c++17 -O2 -Wall -Wextra -fPIC -shared -I"$cuda/include" -o "$out/tools/libum_counters.so" \
    "$root/tests/gpu/um_counters.cc" -L"$cuda/lib64" -lcupti -Wl,-rpath,'$ORIGIN'
  cupti=$(ldd "$out/tools/libum_counters.so" | sed -n 's/^[[:space:]]*\(libcupti[^ ]*\) => \(\/[^ ]*\) .*/\2/p')
  [[ -n $cupti ]] || { echo "bundle: libum_counters.so finds no libcupti" >&2; exit 1; }
  [[ $(cd "$(dirname "$cupti")" && pwd) == $(cd "$out/tools" && pwd) ]] || cp -L "$cupti" "$out/tools/"
  tools+=", tools/um_costs and tools/libum_counters.so"
fi
cat >"$out/env.sh" <<'ENV'
# Source this: the loader finds the libraries libkarma.so, karma and karma-trace were built against.
export LD_LIBRARY_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ENV
# With env.sh, each of those must now come from deps/.
deps=$(cd "$out/deps" && pwd)
stray=$(LD_LIBRARY_PATH=$deps resolved "$out/build/lib/libkarma.so" "$out/build/bin/karma-trace" \
  "$out/build/bin/karma" |
  while read -r name path; do system "$name" || [[ $path == "$deps/$name" ]] || echo "$name ($path)"; done)
[[ -z $stray ]] || { echo "bundle: not taken from deps/: $stray" >&2; exit 1; }
echo "bundle: $out ($(du -sh "$out" | cut -f1)): build/lib/libkarma.so, build/bin/karma, build/bin/karma-trace," \
  "$(ls "$out/deps" | wc -l) libraries in deps/$tools"
echo "bundle: on the GPU machine: source $out/env.sh && tests/gpu/run_gpu_suite.sh --skip-build --build $out/build"
