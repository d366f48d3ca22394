#!/usr/bin/env bash
# The GPU suite: builds KARMA, runs the phase-1 record smoke test, then trains a torchvision ResNet-50 and a
# GPT-2-style model with PyTorch (and with --models jax a JAX one) plain, under `karma run` (libkarma.so) with a
# KARMA_CAPACITY below the iteration's need (per-tensor allocations as libkarma.so sets them, and PyTorch's caching
# allocator), with KARMA_MODE=um, and with activation checkpointing (with --occupy, also on a device made that small
# by tests/gpu/occupy.py); prints a table and writes it as Markdown for docs/gpu-results.md. See tests/gpu/README.md.
set -uo pipefail

usage() {
  cat <<'EOF'
usage: tests/gpu/run_gpu_suite.sh [options]
  --out DIR            results directory (default: build/gpu-suite)
  --build DIR          KARMA build directory (default: $KARMA_BUILD or build)
  --python PY          Python with PyTorch 2.x for CUDA 13 and torchvision, and JAX for --models jax
                       (default: $PYTHON or python3)
  --models LIST        comma-separated: resnet50,gpt2,jax (default: resnet50,gpt2)
  --pressure K         KARMA_CAPACITY = the plain run's peak allocated bytes / K (default: 1.5)
  --capacity BYTES     KARMA_CAPACITY for every model instead (e.g. 20GiB)
  --iters N            timed iterations per run (default: 20)
  --warmup N           warm-up iterations, not timed (default: 5)
  --resnet50-args STR  extra train_bench.py arguments for ResNet-50 (e.g. "--batch 128")
  --gpt2-args STR      extra train_bench.py arguments for the GPT-2 model (e.g. "--layers 12 --seq 2048")
  --jax-args STR       extra train_jax.py arguments for the JAX model (e.g. "--layers 6 --batch 4")
  --timeout S          limit per run, in seconds (default: 1800)
  --occupy             also run plain and KARMA on the copy path with the GPU short of memory: tests/gpu/occupy.py
                       holds all but KARMA_CAPACITY + what the plain run needed outside the framework's allocator +
                       --occupy-margin (rows plain-full, karma-copy-full; no managed memory beside it, which the
                       driver would oversubscribe: that can hang the GPU)
  --occupy-margin B    bytes left free beyond that (default: 256MiB)
  --configs LIST       comma-separated rows to run, in the suite's order whatever the list's (default: plain,
                       plain-again,checkpoint,karma-async,karma-copy,karma,um, and with --occupy plain-full,
                       karma-copy-full; karma-async: managed memory, karma-copy: KARMA_RESIDENCY=copy);
                       the KARMA rows need plain (for KARMA_CAPACITY) unless --capacity is given; for jax, karma,
                       and um are not applicable (XLA would preallocate through managed memory)
  --skip-build         use the existing build (BUILD/lib/libkarma.so and BUILD/bin/karma)
  --skip-smoke         skip the record smoke test
  --check              only check the prerequisites
  --dry-run            no GPU: the Python runs on the CPU with tiny models; KARMA runs are reported as skipped
Exit codes: 0 every run succeeded, 1 some run failed (the table says which), 2 bad command line,
3 a prerequisite is missing, 4 the build failed.
EOF
}

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/gpu
out=$root/build/gpu-suite
build=${KARMA_BUILD:-$root/build}
python=${PYTHON:-python3}
models=resnet50,gpt2
pressure=1.5
capacity=""
iters=""
warmup=""
timeout_s=1800
skip_build=0
skip_smoke=0
check_only=0
dry_run=0
resnet50_args=""
gpt2_args=""
jax_args=""
occupy=0
occupy_margin=256MiB
margin_given=0
configs=""
all_configs=plain,plain-again,checkpoint,karma-async,karma-copy,karma,um,plain-full,karma-copy-full
command_line="tests/gpu/run_gpu_suite.sh $*"

while (($#)); do
  case $1 in
    --out | --build | --python | --models | --pressure | --capacity | --iters | --warmup | --resnet50-args | \
      --gpt2-args | --jax-args | --timeout | --occupy-margin | --configs)
      (($# >= 2)) || { echo "run_gpu_suite: $1 needs a value" >&2; exit 2; } ;;
  esac
  case $1 in
    --out) out=$2; shift ;;
    --build) build=$2; shift ;;
    --python) python=$2; shift ;;
    --models) models=$2; shift ;;
    --pressure) pressure=$2; shift ;;
    --capacity) capacity=$2; shift ;;
    --iters) iters=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --resnet50-args) resnet50_args=$2; shift ;;
    --gpt2-args) gpt2_args=$2; shift ;;
    --jax-args) jax_args=$2; shift ;;
    --timeout) timeout_s=$2; shift ;;
    --occupy) occupy=1 ;;
    --occupy-margin) occupy_margin=$2; margin_given=1; shift ;;
    --configs) configs=$2; shift ;;
    --skip-build) skip_build=1 ;;
    --skip-smoke) skip_smoke=1 ;;
    --check) check_only=1 ;;
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run_gpu_suite: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
# A dry run keeps train_bench.py's small CPU defaults unless told otherwise.
((dry_run)) || { iters=${iters:-20}; warmup=${warmup:-5}; }
[[ $pressure =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "run_gpu_suite: --pressure must be a number" >&2; exit 2; }
[[ $iters =~ ^([1-9][0-9]*)?$ && $warmup =~ ^[0-9]*$ && $timeout_s =~ ^[1-9][0-9]*$ ]] ||
  { echo "run_gpu_suite: --iters, --warmup and --timeout take whole numbers" >&2; exit 2; }
if [[ -z $configs ]]; then
  configs=plain,plain-again,checkpoint,karma-async,karma-copy,karma,um
  ((occupy)) && configs+=,plain-full,karma-copy-full
fi
for c in ${configs//,/ }; do
  [[ ,$all_configs, == *,$c,* ]] || { echo "run_gpu_suite: unknown row $c (rows: $all_configs)" >&2; exit 2; }
done
wanted() { [[ ,$configs, == *,$1,* ]]; }
occupy_env=()
((dry_run)) && occupy_env=(OCCUPY_FAKE_FREE=8GiB)  # no GPU: occupy.py holds memory of a fake device
# The rows whose KARMA_CAPACITY (or what occupy.py leaves) comes from the plain run unless --capacity gives it.
budgeted=(karma-async karma-copy karma um plain-full karma-copy-full)
for c in "${budgeted[@]}"; do
  wanted "$c" && [[ -z $capacity ]] && ! wanted plain &&
    { echo "run_gpu_suite: row $c needs plain or --capacity (for KARMA_CAPACITY)" >&2; exit 2; }
done
[[ -n ${models//,/} ]] || { echo "run_gpu_suite: --models names no model" >&2; exit 2; }
for m in ${models//,/ }; do
  [[ $m == resnet50 || $m == gpt2 || $m == jax ]] || { echo "run_gpu_suite: unknown model $m" >&2; exit 2; }
done
has_model() { [[ ,$models, == *,$1,* ]]; }
# PyTorch: its models, and on a GPU occupy.py, which holds the memory through it.
need_torch=0
if has_model resnet50 || has_model gpt2; then need_torch=1; fi
((!dry_run)) && { wanted plain-full || wanted karma-copy-full; } && need_torch=1
# Rows that would have XLA preallocate its pool (75% of the device) through managed memory: libkarma.so sets XLA's
# per-buffer allocator only where it plans (not with KARMA_ALLOCATORS=keep, nor KARMA_MODE=um), and managed
# allocations beyond the device's free memory can hang a GPU.
jax_not_applicable=(karma um)

say() { echo "run_gpu_suite: $*"; }
missing() {
  echo "run_gpu_suite: MISSING: $*" >&2
  exit 3
}

# ---- prerequisites: every check is bounded in time and says what is missing --------------------------------
command -v timeout >/dev/null || missing "timeout (coreutils)"
command -v "$python" >/dev/null || missing "$python (set --python or PYTHON)"
# A size given is read as KARMA_CAPACITY reads it, by occupy.py's parse_bytes.
if ((margin_given)) && ! "$python" -c 'import sys
sys.path.insert(0, sys.argv[1])
from occupy import parse_bytes
parse_bytes(sys.argv[2])' "$here" "$occupy_margin" 2>/dev/null; then
  echo "run_gpu_suite: --occupy-margin must be a size (e.g. 256MiB)" >&2
  exit 2
fi
if ((!dry_run)); then
  command -v nvidia-smi >/dev/null || missing "nvidia-smi: no NVIDIA driver on this machine"
  gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  [[ -n $gpu ]] || missing "an NVIDIA GPU (nvidia-smi lists none, fails or hangs)"
  say "GPU: $gpu"
  nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  ((skip_smoke)) || [[ -x $nvcc ]] || missing "nvcc (the CUDA 13 toolkit; set NVCC, or --skip-smoke)"
  ((skip_build)) || command -v cmake >/dev/null || missing "cmake"
  torch_version=none torch_cuda=none
  if ((need_torch)); then
    torch_info=$(timeout 300 env -u LD_PRELOAD "$python" - <<'EOF' 2>&1
import torch, torchvision
ok = torch.cuda.is_available()
print(torch.__version__, torch.version.cuda or "none", "cuda" if ok else "nocuda",
      torch.cuda.get_device_name(0) if ok else "-")
EOF
    ) || missing "PyTorch and torchvision for $python: $(tail -1 <<<"$torch_info")"
    read -r torch_version torch_cuda torch_ok _ <<<"$(tail -1 <<<"$torch_info")"
    [[ $torch_version == 2.* ]] || missing "PyTorch 2.x (found $torch_version)"
    [[ $torch_ok == cuda ]] || missing "a GPU usable by PyTorch (torch.cuda.is_available() is False; CUDA $torch_cuda)"
    [[ $torch_cuda == 13.* ]] ||
      say "warning: this PyTorch uses CUDA $torch_cuda; KARMA is built and tested against CUDA 13"
    say "PyTorch $torch_version (CUDA $torch_cuda)"
  fi
else
  gpu="none (dry run)"
  torch_version=none torch_cuda=none
  if ((need_torch)); then
    timeout 300 "$python" -c "import torch, torchvision" 2>/dev/null || missing "PyTorch and torchvision for $python"
    torch_version=$("$python" -c "import torch; print(torch.__version__)")
  fi
fi
# JAX: importable, and (but in a dry run) with a GPU device in its default backend. No preallocation here: this
# process only looks.
jax_version=none
if has_model jax; then
  if ((dry_run)); then jax_env=(JAX_PLATFORMS=cpu); else jax_env=(XLA_PYTHON_CLIENT_PREALLOCATE=false); fi
  jax_info=$(timeout 300 env -u LD_PRELOAD "${jax_env[@]}" "$python" -c 'import jax
d = jax.devices()[0]
print(jax.__version__, d.platform, getattr(d, "device_kind", "-").replace(" ", "_"))' 2>&1) ||
    missing "JAX for $python: $(tail -1 <<<"$jax_info")"
  read -r jax_version jax_platform jax_kind <<<"$(tail -1 <<<"$jax_info")"
  ((dry_run)) || [[ $jax_platform == gpu ]] ||
    missing "a GPU device for JAX (its default device is on $jax_platform: a jax without CUDA support?)"
  say "JAX $jax_version ($jax_platform: ${jax_kind//_/ })"
fi
((check_only)) && { say "prerequisites present"; exit 0; }

mkdir -p "$out" || { echo "run_gpu_suite: cannot create $out" >&2; exit 2; }
rm -f "$out"/*.json "$out"/*.log "$out"/*.occupy "$out"/record_smoke.txt

# ---- build ---------------------------------------------------------------------------------------------
lib=$build/lib/libkarma.so
# Every KARMA row runs through the launcher, as a user runs it; it finds libkarma.so at ../lib beside itself.
launcher=$build/bin/karma
launcher_target=karma-launcher  # its CMake target (the library's is `karma`)
if ((!dry_run && !skip_build)); then
  say "building KARMA in $build (log: $out/build.log)"
  {
    "$root/scripts/setup.sh" &&
      cmake -S "$root" -B "$build" $(command -v ninja >/dev/null && echo -G Ninja) -DCMAKE_BUILD_TYPE=Release &&
      cmake --build "$build" --parallel "$(nproc)" --target karma karma-trace "$launcher_target"
  } >"$out/build.log" 2>&1 || { tail -20 "$out/build.log" >&2; echo "run_gpu_suite: the build failed" >&2; exit 4; }
fi
((dry_run)) || [[ -f $lib ]] || missing "$lib (build KARMA first, or drop --skip-build)"
((dry_run)) || [[ -x $launcher ]] || missing "$launcher, the launcher (build KARMA first, or drop --skip-build)"

# ---- phase 1: the record smoke test ------------------------------------------------------------------------
if ((dry_run || skip_smoke)); then
  if ((dry_run)); then echo "skipped (dry run)"; else echo "skipped (--skip-smoke)"; fi >"$out/record_smoke.txt"
else
  say "record smoke test (log: $out/record_smoke.log)"
  KARMA_BUILD=$build NVCC=$nvcc timeout --kill-after=30 "$timeout_s" "$here/run_record_smoke.sh" >"$out/record_smoke.log" 2>&1
  rc=$?
  if [[ $rc == 0 ]]; then echo "passed" >"$out/record_smoke.txt"; else
    echo "FAILED (exit $rc; see record_smoke.log)" >"$out/record_smoke.txt"
  fi
  say "record smoke test: $(cat "$out/record_smoke.txt")"
fi

# ---- training runs -----------------------------------------------------------------------------------------
# A result file for a run that could not write its own.
note() {  # FILE STATUS MESSAGE
  "$python" -c 'import json, sys; json.dump({"status": sys.argv[2], "message": sys.argv[3]}, open(sys.argv[1], "w"))' \
    "$1" "$2" "$3"
}

# Whether a row means anything for a model: none that would have XLA preallocate through managed memory.
applicable() {  # MODEL CONFIG
  [[ $1 != jax || " ${jax_not_applicable[*]} " != *" $2 "* ]]
}

# run MODEL CONFIG [karma [launcher options...]] -- [training arguments...]: one training run (train_bench.py, or
# train_jax.py for jax), plain or, after the word karma, under `karma run` with the model's KARMA_CAPACITY ($cap);
# its command line heads its log.
run() {
  local model=$1 config=$2
  shift 2
  wanted "$config" && applicable "$model" "$config" || return 0
  local launch=()
  if [[ $1 == karma ]]; then
    shift
    launch=("$launcher" run --capacity "$cap" --log info --trace-dir "$out/traces/$model")
    while [[ $1 != -- ]]; do launch+=("$1"); shift; done
    launch+=(--)
  fi
  shift
  local json=$out/$model-$config.json log=$out/$model-$config.log extra=()
  local program=("$here/train_bench.py" --model "$model")
  case $model in
    resnet50) read -r -a extra <<<"$resnet50_args" ;;
    gpt2) read -r -a extra <<<"$gpt2_args" ;;
    jax) read -r -a extra <<<"$jax_args"; program=("$here/train_jax.py") ;;
  esac
  ((dry_run)) && extra+=(--dry-run)
  [[ -n $iters ]] && extra+=(--iters "$iters")
  [[ -n $warmup ]] && extra+=(--warmup "$warmup")
  local command=(env -u LD_PRELOAD "${launch[@]}" "$python" "${program[@]}" --label "$config" "${extra[@]}" "$@"
    --out "$json")
  { printf 'run_gpu_suite: command:'; printf ' %q' "${command[@]}"; echo; } >"$log"
  timeout --kill-after=30 "$timeout_s" "${command[@]}" >>"$log" 2>&1
  local rc=$?
  if [[ $rc == 124 || $rc == 137 ]]; then
    note "$json" timeout "killed after ${timeout_s}s"
  elif [[ ! -s $json ]]; then
    note "$json" error "exit $rc without a result; see $model-$config.log: $(tail -1 "$log" | tr -d '"\\')"
  fi
  say "$model $config: $("$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["status"], r.get("message", ""))' "$json")"
}

# occupied MODEL CONFIG LEAVE [run's arguments...]: `run` beside tests/gpu/occupy.py holding all but LEAVE bytes of
# the device; a result that says why when the holder cannot start.
occupied() {
  local model=$1 config=$2 leave=$3
  shift 3
  wanted "$config" && applicable "$model" "$config" || return 0
  local ready=$out/$model-$config.occupy log=$out/$model-$config.occupy.log
  rm -f "$ready"
  env -u LD_PRELOAD "${occupy_env[@]}" "$python" "$here/occupy.py" --leave "$leave" --ready "$ready" --parent $$ >"$log" 2>&1 &
  local holder=$! waited=0
  while [[ ! -s $ready ]] && kill -0 "$holder" 2>/dev/null && ((waited < 120)); do sleep 1; ((waited++)); done
  if [[ ! -s $ready ]]; then
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    note "$out/$model-$config.json" error "occupy.py did not hold the memory: $(tail -1 "$log" | tr -d '"\\')"
    say "$model $config: $(tail -1 "$log")"
    return
  fi
  say "$model $config: $(cat "$ready")"
  run "$model" "$config" "$@"
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
}

for model in ${models//,/ }; do
  if [[ $model == jax ]]; then
    for config in "${jax_not_applicable[@]}"; do
      wanted "$config" && note "$out/$model-$config.json" "skipped (not applicable)" "XLA would preallocate \
its pool (75% of the device) through managed memory"
    done
  fi
  run "$model" plain -- || true
  run "$model" plain-again -- || true  # how closely the framework reproduces itself: the floor of loss agreement
  run "$model" checkpoint -- --checkpoint || true
  if ((dry_run)); then
    for config in karma-async karma-copy karma um karma-copy-full; do
      wanted "$config" && applicable "$model" "$config" && note "$out/$model-$config.json" "skipped (dry run)" "no GPU"
    done
    occupied "$model" plain-full 1GiB -- || true  # the holder on a fake device (occupy_env)
    continue
  fi
  cap=$capacity
  if [[ -z $cap ]]; then
    cap=$("$python" -c 'import json, sys
r = json.load(open(sys.argv[1]))
peak = (r.get("peak_allocated_bytes") or 0) if r.get("status") == "ok" else 0
print(int(peak / float(sys.argv[2])) if peak > 0 else "")' "$out/$model-plain.json" "$pressure")
  fi
  if [[ -z $cap ]]; then
    for config in "${budgeted[@]}"; do
      wanted "$config" && applicable "$model" "$config" && note "$out/$model-$config.json" \
        "skipped (no plain reference)" "the plain run failed or gave no peak; give --capacity"
    done
    continue
  fi
  say "$model: KARMA_CAPACITY=$cap"
  # karma-async: libkarma.so as a user runs it (it sets the frameworks' per-tensor allocators: PyTorch's
  # cudaMallocAsync backend, XLA's platform allocator); karma: PyTorch's caching allocator.
  run "$model" karma-async karma -- || true
  # karma-copy: the copy path (KARMA_RESIDENCY=copy: device memory KARMA owns through the VMM API, copy engines).
  run "$model" karma-copy karma --residency copy -- || true
  run "$model" karma karma --set KARMA_ALLOCATORS=keep -- || true
  run "$model" um karma --mode um -- || true
  if wanted plain-full || wanted karma-copy-full; then
    leave=$("$python" -c 'import json, os, sys
sys.path.insert(0, sys.argv[1])
from occupy import parse_bytes
r = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else {}
outside = r.get("outside_torch_bytes", r.get("outside_allocator_bytes", 0))  # train_bench.py, train_jax.py
print(parse_bytes(sys.argv[3]) + outside + parse_bytes(sys.argv[4]))' \
      "$here" "$out/$model-plain.json" "$cap" "$occupy_margin")
    say "$model: the device short of memory: $leave bytes left free"
    occupied "$model" plain-full "$leave" -- || true
    # The copy path asks for no managed memory (and passes through where it cannot be had): the one KARMA row
    # for a device really short of memory, where managed memory would be oversubscribed.
    occupied "$model" karma-copy-full "$leave" karma --residency copy -- || true
  fi
done

# ---- the table -----------------------------------------------------------------------------------------------
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$root" status --porcelain 2>/dev/null) ]] && commit+=" (with local changes)"
pressure_text="KARMA_CAPACITY = plain peak allocated / $pressure"
[[ -n $capacity ]] && pressure_text="KARMA_CAPACITY $capacity"
"$python" -c 'import json, sys
keys = ["date", "gpu", "torch", "cuda", "jax", "karma_commit", "iters", "warmup", "pressure", "command"]
json.dump(dict(zip(keys, sys.argv[2:])), open(sys.argv[1], "w"), indent=1)' "$out/environment.json" \
  "$(date -u +%Y-%m-%dT%H:%MZ)" "$gpu" "$torch_version" "$torch_cuda" "$jax_version" "$commit" "${iters:-default}" \
  "${warmup:-default}" "$pressure_text" "$command_line"
"$python" "$here/summarize.py" "$out" --md "$out/gpu-results.md" --json "$out/results.json" \
  --title "GPU suite results ($gpu)"
status=$?
say "results: $out/gpu-results.md (paste into docs/gpu-results.md), $out/results.json, logs in $out"
exit $((status == 0 ? 0 : 1))
