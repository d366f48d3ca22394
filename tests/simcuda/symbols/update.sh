#!/usr/bin/env bash
# Regenerates the lists of exported function names from the real libraries of a CUDA toolkit (names only).
#   tests/simcuda/symbols/update.sh [CUDA_ROOT]      default /usr/local/cuda
set -euo pipefail
root=${1:-/usr/local/cuda}
here=$(cd "$(dirname "$0")" && pwd)
exports() { objdump -T "$1" | awk '$2=="g" && $3=="DF" && $4!="*UND*" {print $NF}' | sort -u; }
exports "$root/lib64/libcudart.so.13" >"$here/libcudart.so.13.txt"
exports "$root/lib64/libcublas.so.13" >"$here/libcublas.so.13.txt"
exports "$root/lib64/libcudnn.so.9" >"$here/libcudnn.so.9.txt"
exports "$root/lib64/stubs/libcuda.so" >"$here/libcuda.so.1.txt"  # the toolkit's link stub of the driver
wc -l "$here"/*.txt
