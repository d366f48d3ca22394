#!/usr/bin/env bash
# What a short lent GPU session runs, everything it writes packed into one archive (a lent machine may hand back
# only a few files, and may replace the bundle's folder between calls): first the copy, VMM and launch probe
# move_costs (a minute at most), then the suite at small sizes in the time left (ResNet-50 first, then GPT-2; budget:
# plain peak / 2; plain, KARMA over managed memory and on the copy path, and the copy path on the device made short
# of memory by occupy.py), then as time allows the JAX model plain and under `karma run` on both paths (where
# `import jax` works), the managed-memory probe, and each model's caching-allocator KARMA row with
# KARMA_MOVE_THREADS=0 (moves from the application's thread) and with KARMA_BATCH_MOVES=0 (one call per range).
# Every KARMA run goes through the bundle's launcher (build/bin/karma).
#   tests/gpu/lent_session.sh BUNDLE OUT [SECONDS]
# BUNDLE: made by tests/gpu/bundle.sh; OUT: a folder for results.tgz and traces.tgz; SECONDS: the whole session's
# limit (default 540). Prints the suite's table at the end. See tests/gpu/README.md.
set -uo pipefail
usage() { echo "usage: tests/gpu/lent_session.sh BUNDLE OUT [SECONDS]"; }
(($# >= 2 && $# <= 3)) || { usage >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/gpu
bundle=$(cd "$1" 2>/dev/null && pwd) || { echo "lent_session: no bundle at $1" >&2; exit 2; }
out=$2
limit=${3:-540}
[[ $limit =~ ^[0-9]+$ ]] && ((limit >= 120)) || { echo "lent_session: SECONDS must be 120 or more" >&2; exit 2; }
[[ -f $bundle/env.sh && -f $bundle/build/lib/libkarma.so && -x $bundle/build/bin/karma ]] ||
  { echo "lent_session: $bundle is no bundle (env.sh, build/lib/libkarma.so, build/bin/karma)" >&2; exit 2; }
launcher=$bundle/build/bin/karma
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
python=${PYTHON:-python3}
# shellcheck disable=SC1091
source "$bundle/env.sh"
work=$(mktemp -d)
start=$SECONDS
left() { echo $((limit - (SECONDS - start))); }
say() { echo "lent_session [$((SECONDS - start))s]: $*"; }
pack() {
  tar czf "$out/results.tgz" -C "$work" --exclude='*.ktrace' . && say "results: $out/results.tgz"
  # The recorded iterations apart (karma-trace reads them here), each under 64 MiB: results.tgz comes back without
  # them if this one is too large to.
  (cd "$work" && find . -name '*.ktrace' -size -64M -print0 | tar czf "$out/traces.tgz" --null -T -) &&
    say "traces: $out/traces.tgz"
}
trap pack EXIT

{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader
  "$python" -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__)'
  git -C "$root" log -1 --format='commit %h %s' 2>/dev/null
} >"$work/machine.txt" 2>&1
# JAX where it imports (the import alone: its GPU backend is the suite's check).
jax_ok=0
if jax_version=$(timeout 60 env -u LD_PRELOAD "$python" -c 'import jax; print(jax.__version__)' 2>&1); then
  jax_ok=1
  echo "jax $jax_version" >>"$work/machine.txt"
else
  echo "jax: not importable ($(tail -1 <<<"$jax_version"))" >>"$work/machine.txt"
fi
cat "$work/machine.txt"

# What copies, CUDA's VMM calls and launches cost on this GPU, against simcuda's H100 figures: first, as it is
# quick and its tables are the session's surest result.
if [[ -x $bundle/tools/move_costs ]]; then
  say "move_costs"
  timeout --kill-after=10 60 "$bundle/tools/move_costs" >"$work/move_costs.txt" 2>&1
  say "move_costs: exit $?"
  cat "$work/move_costs.txt"
fi

# The suite, ResNet-50 first, then GPT-2, with KARMA_CAPACITY = plain peak / 2: plain, KARMA over managed memory
# (karma-async) and on the copy path (karma-copy), and the copy path again on the device made short of memory by
# occupy.py (never a managed-memory row beside it: the driver would oversubscribe, which can hang the GPU), in all
# the time left but 20 s.
budget=$(($(left) - 20))
if ((budget >= 60)); then
  say "suite ($budget s)"
  timeout --kill-after=10 $budget "$here/run_gpu_suite.sh" --skip-build --skip-smoke --build "$bundle/build" \
    --python "$python" --out "$work/suite" --iters 16 --warmup 8 --timeout 75 --pressure 2 \
    --resnet50-args "--batch 32" --gpt2-args "--layers 6 --batch 4" --models resnet50,gpt2 \
    --configs plain,karma-async,karma-copy,karma-copy-full >"$work/suite.txt" 2>&1
  say "suite: exit $?"
else
  say "suite skipped: $budget s left for it"
fi

# Then, as time allows: the JAX model (GPT-2's sizes) plain and under `karma run` on both paths (libkarma.so sets
# XLA's platform allocator, no preallocation), a suite of its own (another results folder: each suite run clears its
# own), ...
jax_budget=$(($(left) - 20))
if ((jax_ok && jax_budget >= 90)); then
  say "suite, JAX ($jax_budget s)"
  timeout --kill-after=10 $jax_budget "$here/run_gpu_suite.sh" --skip-build --skip-smoke --build "$bundle/build" \
    --python "$python" --out "$work/suite-jax" --iters 16 --warmup 8 --timeout $((jax_budget / 3)) \
    --jax-args "--layers 6 --batch 4" --models jax --configs plain,karma-async,karma-copy --pressure 2 \
    >"$work/suite-jax.txt" 2>&1
  say "suite, JAX: exit $?"
elif ((jax_ok)); then
  say "JAX skipped: $jax_budget s left for it"
fi

# ... the managed-memory probe, ...
if [[ -x $bundle/tools/um_costs ]] && (($(left) > 70)); then
  say "um_costs"
  # Line-buffered: a run cut off at its limit still leaves the tables it printed (run 10's left none).
  timeout 60 stdbuf -oL "$bundle/tools/um_costs" --blocks 64 --reps 5 >"$work/um_costs.txt" 2>&1
  cat "$work/um_costs.txt"
fi

# ... and the caching-allocator rows again, at the suite's capacity and sizes, with the moves from the application's thread
# (KARMA_MOVE_THREADS=0; the default is KARMA's own threads) and with one managed-memory call per range
# (KARMA_BATCH_MOVES=0), GPT-2 first, while time is left.
for row in gpt2:app-thread gpt2:unbatched resnet50:app-thread resnet50:unbatched; do
  model=${row%%:*} variant=${row#*:}
  plain=$work/suite/$model-plain.json
  (($(left) > 50)) && [[ -f $plain ]] || continue
  cap=$("$python" -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(int(r["peak_allocated_bytes"] / 1.5) if r.get("status") == "ok" else "")' "$plain")
  [[ -n $cap ]] || continue
  args=(--batch 32)
  [[ $model == gpt2 ]] && args=(--layers 6 --batch 4)
  switch=KARMA_BATCH_MOVES=0
  [[ $variant == app-thread ]] && switch=KARMA_MOVE_THREADS=0
  say "$model karma-$variant ($switch)"
  command=(env -u LD_PRELOAD "$launcher" run --capacity "$cap" --log info --trace-dir "$work/traces-$variant"
    --set KARMA_ALLOCATORS=keep --set "$switch" -- "$python" "$here/train_bench.py" --model "$model" "${args[@]}"
    --iters 16 --warmup 8 --label "karma-$variant" --out "$work/suite/$model-karma-$variant.json")
  log=$work/suite/$model-karma-$variant.log
  { printf 'lent_session: command:'; printf ' %q' "${command[@]}"; echo; } >"$log"
  timeout --kill-after=10 $(($(left) - 15)) "${command[@]}" >>"$log" 2>&1
  say "$model karma-$variant: exit $?"
done
for suite in suite:"" suite-jax:", JAX"; do
  dir=$work/${suite%%:*}
  [[ -d $dir ]] || continue
  "$python" "$here/summarize.py" "$dir" --md "$dir/gpu-results.md" --json "$dir/results.json" \
    --title "GPU suite results (lent session${suite#*:})"
done
