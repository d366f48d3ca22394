#!/usr/bin/env bash
# What of the GPU suite can be checked without a GPU: the scripts' syntax and command lines, a clear failure when
# the GPU (or JAX) is missing, the JAX model where JAX imports, and (with a Python that has PyTorch and torchvision)
# both PyTorch models built and trained on the CPU through the suite's dry run, down to the results table.
#   cpu_check.sh SOURCE_DIR [PYTHON]      PYTHON: default /usr/bin/python3
set -uo pipefail
src=$1 python=${2:-/usr/bin/python3}
here=$src/tests/gpu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

bash -n "$here/run_gpu_suite.sh" || fail "run_gpu_suite.sh does not parse"
bash -n "$here/lent_session.sh" || fail "lent_session.sh does not parse"
bash -n "$here/bundle.sh" || fail "bundle.sh does not parse"
"$here/lent_session.sh" "$tmp/nowhere" "$tmp/out" >/dev/null 2>&1
[[ $? == 2 ]] || fail "lent_session.sh without a bundle must exit 2"
mkdir -p "$tmp/oldbundle/build/lib" && touch "$tmp/oldbundle/env.sh" "$tmp/oldbundle/build/lib/libkarma.so"
"$here/lent_session.sh" "$tmp/oldbundle" "$tmp/out" >"$tmp/oldbundle.out" 2>&1
[[ $? == 2 ]] && grep -q "build/bin/karma" "$tmp/oldbundle.out" ||
  fail "lent_session.sh with a bundle without the launcher must exit 2 naming it: $(cat "$tmp/oldbundle.out")"
"$here/run_gpu_suite.sh" --iters 0 >/dev/null 2>&1
[[ $? == 2 ]] || fail "--iters 0 must be refused with exit 2"
"$here/run_gpu_suite.sh" --models vgg >/dev/null 2>&1
[[ $? == 2 ]] || fail "an unknown model must be refused with exit 2"
"$here/run_gpu_suite.sh" --models jax,vgg >/dev/null 2>&1
[[ $? == 2 ]] || fail "an unknown model beside jax must be refused with exit 2"
"$here/run_gpu_suite.sh" --models , >/dev/null 2>&1
[[ $? == 2 ]] || fail "--models without a model must be refused with exit 2"
"$here/run_gpu_suite.sh" --models jax --jax-args >/dev/null 2>&1
[[ $? == 2 ]] || fail "--jax-args without a value must be refused with exit 2"
"$here/run_gpu_suite.sh" --configs plain,vgg >/dev/null 2>&1
[[ $? == 2 ]] || fail "an unknown row must be refused with exit 2"
"$here/run_gpu_suite.sh" --configs karma-copy-full >/dev/null 2>&1
[[ $? == 2 ]] || fail "a KARMA row without plain or --capacity must be refused with exit 2"
"$here/run_gpu_suite.sh" --occupy-margin 3PB >/dev/null 2>&1
[[ $? == 2 ]] || fail "an --occupy-margin that is no size must be refused with exit 2"

# No GPU here: the suite must stop at once, saying what is missing (a PATH without nvidia-smi makes sure).
mkdir "$tmp/bin"
for tool in timeout python3 bash env dirname head tail; do ln -s "$(command -v "$tool")" "$tmp/bin/$tool"; done
start=$SECONDS
PATH=$tmp/bin timeout 120 "$here/run_gpu_suite.sh" --check >"$tmp/check.out" 2>&1
rc=$?
[[ $rc == 3 ]] || fail "--check without a GPU: exit $rc, expected 3: $(cat "$tmp/check.out")"
grep -q "MISSING: nvidia-smi" "$tmp/check.out" || fail "no clear message: $(cat "$tmp/check.out")"
((SECONDS - start < 60)) || fail "--check took $((SECONDS - start)) s"

# train_jax.py: its command line is checked before jax is imported, and without jax it says so (a jax module that
# cannot be imported shadows any installed one here), exit 3 with a result; so does the suite with --models jax.
"$python" -m py_compile "$here/train_jax.py" || fail "train_jax.py does not compile"
mkdir "$tmp/nojax"
echo 'raise ImportError("no jax here (cpu_check.sh)")' >"$tmp/nojax/jax.py"
for bad in "--d-model 65" "--iters 0" "--warmup -1" "--layers x" "--model gpt2"; do
  # shellcheck disable=SC2086
  PYTHONPATH=$tmp/nojax "$python" "$here/train_jax.py" --dry-run $bad >/dev/null 2>&1
  [[ $? == 64 ]] || fail "train_jax.py must refuse $bad with exit 64"
done
PYTHONPATH=$tmp/nojax "$python" "$here/train_jax.py" --dry-run --out "$tmp/nojax.json" >"$tmp/nojax.out" 2>&1
rc=$?
[[ $rc == 3 ]] && grep -q "MISSING: jax" "$tmp/nojax.out" ||
  fail "train_jax.py without jax: exit $rc, expected 3 and MISSING: jax: $(cat "$tmp/nojax.out")"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
assert r["status"] == "missing" and r["model"] == "jax" and "no jax here" in r["message"], r' "$tmp/nojax.json" ||
  fail "train_jax.py without jax must write a result saying so: $(cat "$tmp/nojax.json")"
PYTHONPATH=$tmp/nojax timeout 120 "$here/run_gpu_suite.sh" --dry-run --models jax --python "$python" \
  --out "$tmp/nojax-suite" >"$tmp/nojax-suite.out" 2>&1
rc=$?
[[ $rc == 3 ]] && grep -q "MISSING: JAX" "$tmp/nojax-suite.out" ||
  fail "the suite's dry run with --models jax and no jax: exit $rc, expected 3: $(cat "$tmp/nojax-suite.out")"

# The table says whether each KARMA run replayed a plan (from libkarma.so's exit summary in the run's log).
mkdir "$tmp/fake"
python3 - "$tmp/fake" <<'PY' || fail "could not write the fake results"
import json, os, sys
d = sys.argv[1]
run = lambda losses: {"status": "ok", "losses": losses, "times_ms": [10.0], "ms_mean": 10.0}
for config, summary in (("plain", None), ("karma", "karma: mode auto, 3 iterations (10 ops each), peak 1 MiB "
                        "allocated vs 1 MiB budget; faults and stalls not measured (no plan replayed); no iteration "
                        "recorded"), ("karma-async", "karma: mode auto, 9 iterations (10 ops each), peak 1 MiB; "
                        "prefetched 1 MiB, evicted 1 MiB; plan p.json; trace t.ktrace\n"
                        "karma: the plan's moves ran at 19.5 GB/s (1 GiB) to the device and 6.8 GB/s (1 GiB) to the "
                        "host over 2 iterations; the plan assumed 20 and 7 GB/s (h100-80g)\n"
                        "karma: planning with the host link an earlier run measured on this device: 12 GB/s to the "
                        "device, 4 GB/s to the host (traces/link-NVIDIA_H100_80GB_HBM3.json; the profile says 20 "
                        "and 7)\n"
                        "karma: planned on h100-80g for 1.91 GiB: 9.00 ms simulated, 5.00 ms in core (fits in "
                        "core; 1.27 GiB at the in-core peak, 3.02 GiB held at once while it was recorded); plan p.json\n"
                        "karma: replaying the plan from iteration 5: 0 prefetches, 0 evictions of 0 B")):
    r = run([1.0, 0.5])
    if config == "karma-async":
        r["allocator_backend"] = "cudaMallocAsync"
    json.dump(r, open(os.path.join(d, f"gpt2-{config}.json"), "w"))
    if summary:
        open(os.path.join(d, f"gpt2-{config}.log"), "w").write(summary + "\n")
json.dump(run([2.0, 1.5]), open(os.path.join(d, "jax-plain.json"), "w"))
r = run([2.0, 1.5])
r["allocator_backend"] = "XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false"
json.dump(r, open(os.path.join(d, "jax-karma-async.json"), "w"))
json.dump({"status": "skipped (not applicable)", "message": "XLA would preallocate"},
          open(os.path.join(d, "jax-karma.json"), "w"))
PY
python3 "$here/summarize.py" "$tmp/fake" --md "$tmp/fake/t.md" --json "$tmp/fake/t.json" --title fake >/dev/null ||
  fail "summarize.py on fake results: exit $?"
grep -q '^| gpt2 | libkarma.so, caching allocator | ok |.*| none |' "$tmp/fake/t.md" ||
  fail "a run without a plan must say so: $(cat "$tmp/fake/t.md")"
grep -q '^- gpt2 karma-async: cudaMallocAsync$' "$tmp/fake/t.md" ||
  fail "the allocator backend PyTorch reported must be listed: $(cat "$tmp/fake/t.md")"
grep -q '^| gpt2 | libkarma.so, cudaMallocAsync, managed memory (its defaults) | ok |.*| replayed |' "$tmp/fake/t.md" ||
  fail "a replayed plan must say so: $(cat "$tmp/fake/t.md")"
grep -q '^| jax | libkarma.so, XLA.s platform allocator, managed memory (its defaults) | ok |' "$tmp/fake/t.md" ||
  fail "the JAX row under libkarma.so must be labelled as such: $(cat "$tmp/fake/t.md")"
grep -q '^| jax | libkarma.so, XLA.s BFC allocator | skipped (not applicable)' "$tmp/fake/t.md" ||
  fail "the JAX row with KARMA_ALLOCATORS=keep must say it is not applicable: $(cat "$tmp/fake/t.md")"
[[ $(grep -A 2 "^XLA's allocator" "$tmp/fake/t.md" | tail -1) == \
  "- jax karma-async: XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false" ]] &&
  ! grep -A 3 "^PyTorch's allocator" "$tmp/fake/t.md" | grep -q "^- jax" ||
  fail "XLA's allocator must be listed for the JAX rows, apart from PyTorch's: $(cat "$tmp/fake/t.md")"
grep -q "prefetched 1 MiB.* -- the plan's moves ran at 19.5 GB/s" "$tmp/fake/t.md" ||
  fail "the measured link must be kept beside the summary: $(cat "$tmp/fake/t.md")"
grep -q "the plan assumed 20 and 7 GB/s (h100-80g) -- planning with the host link an earlier run measured" \
  "$tmp/fake/t.md" || fail "the link an earlier run recorded must be kept beside the summary: $(cat "$tmp/fake/t.md")"
grep -q "1.27 GiB at the in-core peak, 3.02 GiB held at once while it was recorded); plan p.json -- replaying the plan from iteration 5: 0 prefetches" \
  "$tmp/fake/t.md" || fail "the plan's lines must be kept beside the summary: $(cat "$tmp/fake/t.md")"

# The device made short of memory: occupy.py's sizing against a fake device, and the rows it gives.
python3 "$here/occupy.py" --self-test >/dev/null || fail "occupy.py --self-test"
python3 "$here/occupy.py" --leave 3PB >/dev/null 2>&1
[[ $? == 64 ]] || fail "occupy.py must refuse a size it cannot read with exit 64"
mkdir "$tmp/full"
python3 - "$tmp/full" <<'PY' || fail "could not write the fake results"
import json, os, sys
d = sys.argv[1]
ok = {"status": "ok", "losses": [1.0, 0.5], "times_ms": [10.0], "ms_mean": 10.0}
for config, r in (("plain", ok), ("plain-full", {"status": "oom", "message": "CUDA out of memory"}), ("karma-copy-full", ok)):
    json.dump(r, open(os.path.join(d, f"gpt2-{config}.json"), "w"))
open(os.path.join(d, "gpt2-karma-copy-full.occupy"), "w").write("occupy: holding 75.00 GiB on GPU; 2.10 GiB of 79.10 GiB free\n")
PY
python3 "$here/summarize.py" "$tmp/full" --md "$tmp/full/t.md" >/dev/null ||
  fail "an out-of-memory plain run on the device short of memory is expected: exit $?"
grep -q '^| gpt2 | libkarma.so, cudaMallocAsync, KARMA_RESIDENCY=copy, device short of memory | ok |' "$tmp/full/t.md" ||
  fail "karma-copy-full row: $(cat "$tmp/full/t.md")"
grep -q '^- gpt2 karma-copy-full: occupy: holding 75.00 GiB' "$tmp/full/t.md" || fail "occupy line: $(cat "$tmp/full/t.md")"
mv "$tmp/full/gpt2-plain-full.json" "$tmp/full/gpt2-um.json"
python3 "$here/summarize.py" "$tmp/full" >/dev/null
[[ $? == 2 ]] || fail "an out-of-memory run elsewhere must fail the summary"

# The JAX model trained on the CPU through the suite's dry run, where this Python has jax (no PyTorch needed).
if "$python" -c "import jax" 2>/dev/null; then
  "$here/run_gpu_suite.sh" --dry-run --models jax --occupy --python "$python" --out "$tmp/jax" >"$tmp/jax.log" 2>&1 ||
    fail "dry run of the suite with --models jax: $(tail -20 "$tmp/jax.log")"
  md=$tmp/jax/gpu-results.md
  [[ $(grep -c '^| jax |' "$md") == 9 ]] || fail "expected 9 jax rows: $(cat "$md")"
  for row in "JAX, enough memory" "JAX again (run-to-run agreement)" "jax.checkpoint" "JAX, device short of memory"; do
    grep -q "^| jax | $row | ok |" "$md" || fail "jax row $row must train: $(cat "$md")"
  done
  [[ $(grep -c '^| jax | .* | skipped (not applicable)' "$md") == 2 ]] ||
    fail "karma and um must be skipped as not applicable for jax: $(cat "$md")"
  grep -q '^| jax | libkarma.so, XLA.s platform allocator, managed memory (its defaults) | skipped (dry run)' "$md" ||
    fail "the JAX KARMA run must be skipped in a dry run: $(cat "$md")"
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
assert r["status"] == "ok" and r["parameters"] > 0 and len(r["losses"]) == 3 and len(r["times_ms"]) == 2, r' \
    "$tmp/jax/jax-plain.json" || fail "JAX result: $(cat "$tmp/jax/jax-plain.json")"
  grep -q '^run_gpu_suite: command: .*train_jax.py --label plain --dry-run' "$tmp/jax/jax-plain.log" ||
    fail "a run's log must start with its command line: $(head -3 "$tmp/jax/jax-plain.log")"
else
  echo "skipped the JAX dry run: $python has no jax"
fi

if ! "$python" -c "import torch, torchvision" 2>/dev/null; then
  echo "skipped the Python checks: $python has no PyTorch/torchvision"
  exit 77
fi
"$python" "$here/train_bench.py" --model gpt2 --d-model 65 --dry-run >/dev/null 2>&1
[[ $? == 64 ]] || fail "train_bench.py must refuse --d-model 65 --heads 4 with exit 64"
"$python" "$here/train_bench.py" --model resnet50 --dry-run --iters 1 --warmup 0 --out "$tmp/r.json" >"$tmp/r.log" 2>&1 ||
  fail "ResNet-50 dry run: $(tail -5 "$tmp/r.log")"
"$python" -c 'import json, sys; r = json.load(open(sys.argv[1]))
assert r["status"] == "ok" and r["parameters"] > 25_000_000 and len(r["losses"]) == 1, r' "$tmp/r.json" ||
  fail "ResNet-50 result: $(cat "$tmp/r.json")"

"$here/run_gpu_suite.sh" --dry-run --models gpt2 --occupy --python "$python" --out "$tmp/suite" >"$tmp/suite.log" 2>&1 ||
  fail "dry run of the suite: $(tail -20 "$tmp/suite.log")"
md=$tmp/suite/gpu-results.md
[[ $(grep -c '^| gpt2 |' "$md") == 9 ]] || fail "expected 9 gpt2 rows: $(cat "$md")"
grep -q '^| gpt2 | torch.utils.checkpoint | ok |.*| bit-identical |' "$md" ||
  fail "checkpointing must reproduce the plain losses: $(cat "$md")"
grep -q '^| gpt2 | libkarma.so, cudaMallocAsync, managed memory (its defaults) | skipped' "$md" || fail "KARMA runs must be skipped: $(cat "$md")"
grep -q '^- gpt2 plain-full: occupy: holding 7.00 GiB on a fake device; 1.00 GiB of 8.00 GiB free' "$md" ||
  fail "the plain-full row must run beside occupy.py (a fake device in a dry run): $(cat "$md")"
! pgrep -f "occupy.py --leave 1GiB --ready $tmp/suite" >/dev/null || fail "occupy.py outlived its row"
echo "ok: GPU suite scripts checked without a GPU"
