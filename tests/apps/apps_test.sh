#!/usr/bin/env bash
# The trainer apps on simcuda: output contract, unchanged binaries, out-of-memory, determinism, sizing.
#   apps_test.sh SOURCE_DIR BUILD_DIR CASE [MEM]     MEM: device memory of the identical_* cases (256MiB)
set -uo pipefail
src=$1 build=$2 case=$3 mem=${4:-256MiB}
simrun=("$src/scripts/simrun" --build "$build")
bin=$build/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# run NAME SIMRUN_OPTIONS... -- APP ARGS...: stdout to $tmp/NAME.out, stderr to $tmp/NAME.err, status in $rc.
run() {
  local name=$1
  shift
  "${simrun[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
}

# The losses and the checksum of a run: everything but the virtual milliseconds.
results() { sed -E 's/ ms [0-9.]+$//' "$tmp/$1.out"; }

# A number from the JSON statistics file.
stat() { grep "\"$2\"" "$1" | sed -E 's/.*: *([0-9.eE+-]+),?/\1/'; }

case $case in
contract)
  run a --mem 128MiB -- "$bin/mlp_trainer" --iters 2 --size-factor 0.25
  [[ $rc == 0 ]] || fail "exit $rc: $(cat "$tmp/a.err")"
  [[ $(wc -l <"$tmp/a.out") == 3 ]] || fail "expected 3 lines: $(cat "$tmp/a.out")"
  grep -Eq '^iter 0 loss [-+0-9.e]+ ms [0-9]+\.[0-9]{4}$' "$tmp/a.out" || fail "bad iteration line: $(head -1 "$tmp/a.out")"
  grep -Eq '^iter 1 loss [-+0-9.e]+ ms [0-9]+\.[0-9]{4}$' "$tmp/a.out" || fail "bad iteration line"
  grep -Eq '^checksum [0-9a-f]{16}$' "$tmp/a.out" || fail "bad checksum line: $(tail -1 "$tmp/a.out")"
  awk '/^iter/ && $6 <= 0 {exit 1}' "$tmp/a.out" || fail "an iteration took no virtual time"
  grep -q -- "--alloc" <<<"$("$bin/mlp_trainer" --help)" || fail "--help does not list --alloc"
  "$bin/skipnet_trainer" --no-such-flag >/dev/null 2>&1
  [[ $? == 64 ]] || fail "a bad flag must exit 64"
  "$bin/mlp_trainer" --alloc pool >/dev/null 2>&1
  [[ $? == 64 ]] || fail "a bad --alloc must exit 64"
  ;;

real_libcudart)
  # The apps are linked the normal way against the toolkit's libraries: they record only the sonames, carry
  # no run path, and bind to the real libraries' versioned symbols.
  for app in mlp_trainer skipnet_trainer; do
    dynamic=$(readelf -d "$bin/$app")
    imports=$(objdump -T "$bin/$app")
    needed=$(awk '/NEEDED/ {print $NF}' <<<"$dynamic" | tr -d '[]' | tr '\n' ' ')
    [[ $needed == *libcudart.so.13* && $needed == *libcublas.so.13* ]] || fail "$app needs: $needed"
    ! grep -Eq 'RPATH|RUNPATH' <<<"$dynamic" || fail "$app carries a run path"
    grep -Eq 'UND.*\(libcudart\.so\.13\)[[:space:]]+cudaMalloc$' <<<"$imports" ||
      fail "$app does not import cudaMalloc@libcudart.so.13"
    grep -Eq 'UND.*\(libcublas\.so\.13\)[[:space:]]+cublasSgemm_v2$' <<<"$imports" ||
      fail "$app does not import cublasSgemm_v2@libcublas.so.13"
    # Without simrun the loader does not find simcuda; with it, simcuda's libraries come first.
    plain=$(ldd "$bin/$app" 2>&1)
    ! grep -q "$build/lib/simcuda" <<<"$plain" || fail "$app finds simcuda without simrun"
    ldd_out=$("${simrun[@]}" -- ldd "$bin/$app")
    for lib in libcudart.so.13 libcublas.so.13; do
      grep -q "$lib => $build/lib/simcuda/$lib" <<<"$ldd_out" || fail "under simrun $lib is not simcuda's: $ldd_out"
    done
    run $app --mem 64MiB -- "$bin/$app" --iters 1 --footprint 16MiB
    [[ $rc == 0 ]] || fail "$app exit $rc under simrun: $(cat "$tmp/$app.err")"
    grep -q '^checksum ' "$tmp/$app.out" || fail "$app printed no checksum"
  done
  ;;

oom_mlp | oom_skipnet)
  app=${case#oom_}_trainer
  for alloc in default async malloc; do
    args=(--iters 3 --size-factor 2)
    [[ $alloc == default ]] || args+=(--alloc "$alloc")
    run oom --mem 64MiB -- "$bin/$app" "${args[@]}"
    [[ $rc == 2 ]] || fail "$app ${args[*]}: exit $rc, expected 2: $(cat "$tmp/oom.err")"
    grep -q "out of memory" "$tmp/oom.err" || fail "$app ${args[*]}: no 'out of memory' message"
  done
  ;;

identical_mlp | identical_skipnet)
  app=${case#identical_}_trainer
  for alloc in async segments malloc async; do
    run "$alloc" --mem "$mem" -- "$bin/$app" --iters 3 --size-factor 0.5 --alloc "$alloc"
    [[ $rc == 0 ]] || fail "$app --alloc $alloc: exit $rc: $(cat "$tmp/$alloc.err")"
    [[ $(grep -c '^iter' "$tmp/$alloc.out") == 3 ]] || fail "$app --alloc $alloc: $(cat "$tmp/$alloc.out")"
    if [[ -f $tmp/first ]]; then
      diff <(results "$alloc") "$tmp/first" >/dev/null || fail "$app --alloc $alloc differs: $(diff <(results "$alloc") "$tmp/first")"
    else
      results "$alloc" >"$tmp/first"
    fi
  done
  cat "$tmp/first"
  ;;

footprint)
  # --footprint sizes the ideal in-core peak: with one cudaMallocAsync per tensor the device's peak is that.
  for app in mlp_trainer skipnet_trainer; do
    run $app --mem 1GiB --stats "$tmp/$app.json" -- "$bin/$app" --iters 1 --footprint 96MiB --alloc async
    [[ $rc == 0 ]] || fail "$app exit $rc: $(cat "$tmp/$app.err")"
    peak=$(stat "$tmp/$app.json" peak_device_bytes)
    target=$((96 << 20))
    echo "$app: peak device bytes $peak for a 96 MiB footprint"
    ((peak > target * 97 / 100 && peak < target * 103 / 100)) || fail "$app: peak $peak is not within 3% of $target"
    kernels=$(stat "$tmp/$app.json" kernels)
    ((kernels > 50)) || fail "$app: only $kernels kernels"
  done
  ;;

learning)
  # The synthetic task is learnable: the loss goes down.
  for app in mlp_trainer skipnet_trainer; do
    run $app --mem 128MiB -- "$bin/$app" --iters 4 --size-factor 0.25
    [[ $rc == 0 ]] || fail "$app exit $rc"
    awk '/^iter/ {loss[$2] = $4} END {exit !(loss[3] < 0.9 * loss[0])}' "$tmp/$app.out" ||
      fail "$app does not learn: $(cat "$tmp/$app.out")"
  done
  ;;

karma_flag)
  grep -q SIMCUDA_MEM <<<"$("${simrun[@]}" --help)" || fail "simrun --help does not document SIMCUDA_MEM"
  "${simrun[@]}" >/dev/null 2>&1
  [[ $? == 125 ]] || fail "simrun without a command must exit 125"
  "${simrun[@]}" --bogus -- true >/dev/null 2>&1
  [[ $? == 125 ]] || fail "simrun with an unknown option must exit 125"
  "${simrun[@]}" --mode um -- sh -c '[ "$KARMA_MODE" = um ]' || fail "--mode does not set KARMA_MODE"
  if [[ -f $build/lib/libkarma.so ]]; then
    "${simrun[@]}" --karma -- sh -c 'case "$LD_PRELOAD" in *libkarma.so*) exit 0;; esac; exit 1' ||
      fail "--karma does not preload libkarma.so"
  else
    "${simrun[@]}" --karma -- true 2>"$tmp/k.err"
    rc=$?
    [[ $rc != 0 ]] || fail "--karma without libkarma.so must fail"
    grep -q "libkarma.so is not built" "$tmp/k.err" || fail "no clear message: $(cat "$tmp/k.err")"
  fi
  ;;

*)
  fail "unknown case $case"
  ;;
esac
echo "ok: $case"
