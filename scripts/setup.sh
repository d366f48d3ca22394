#!/usr/bin/env bash
# Installs the Debian packages the build needs (only those missing) and checks the CUDA 13 toolkit headers.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build pkg-config python3
  libcli11-dev nlohmann-json3-dev libfmt-dev libboost-dev zlib1g-dev
  libglpk-dev libunwind-dev libgtest-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  # CPU PyTorch: the host optimizer against torch.optim, the MPI Python helper, the GPU suite's dry run
  python3-torch python3-torchvision
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run as root, or: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

CUDA_ROOT=${KARMA_CUDA_ROOT:-/usr/local/cuda}
missing_headers=()
for h in cuda_runtime_api.h cuda.h cublas_v2.h cudnn.h; do
  [[ -f "$CUDA_ROOT/include/$h" ]] || missing_headers+=("$h")
done
if ((${#missing_headers[@]})); then
  echo "setup: the CUDA 13 toolkit headers are missing under $CUDA_ROOT/include: ${missing_headers[*]}" >&2
  echo "setup: install the CUDA toolkit (a driver is not needed) or set KARMA_CUDA_ROOT" >&2
  exit 1
fi
if ! grep -Eq "define CUDART_VERSION +13" "$CUDA_ROOT/include/cuda_runtime_api.h"; then
  echo "setup: warning: $CUDA_ROOT is not a CUDA 13 toolkit; the build targets CUDA 13" >&2
fi
