#!/usr/bin/env bash
# ctest (label bench): bench_host_optimizer --quick prints a row per variant and thread count and, last, the
# exact adam_fp32 / stream_triad / ratio line, with every figure positive.
set -euo pipefail
bench=$1
out=$("$bench" --quick)
echo "$out"
fail() { echo "check_quick: $*" >&2; exit 1; }
positive() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v x="$1" 'BEGIN { exit !(x > 0) }'; }

last=$(tail -n 1 <<<"$out")
num='[0-9]+\.[0-9]+'
[[ $last =~ ^adam_fp32\ ($num)\ stream_triad\ ($num)\ ratio\ ($num)$ ]] || fail "bad last line: '$last'"
for v in "${BASH_REMATCH[@]:1}"; do
  positive "$v" || fail "figure $v in the last line is not positive"
done

for variant in adam_fp32 adamw_fp32 sgd_momentum_fp32 adam_bf16; do
  for threads in 1 2; do
    row=$(grep -E "^ *$variant +[0-9]+[MB]? +$threads +" <<<"$out" | head -n 1) || fail "no row for $variant, $threads thread(s)"
    read -r _ _ _ best median gparams gbs triad ratio extra <<<"$row"
    [[ -z $extra ]] || fail "$variant, $threads thread(s): more columns than expected: '$row'"
    for v in "$best" "$median" "$gparams" "$gbs" "$triad" "$ratio"; do
      positive "$v" || fail "$variant, $threads thread(s): figure '$v' is not a positive number"
    done
  done
done
for threads in 1 2; do
  grep -qE "^ +$threads +(ordinary|stream512|stream128) +$num +$num$" <<<"$out" || fail "no triad row for $threads thread(s)"
done
echo "check_quick: ok"
