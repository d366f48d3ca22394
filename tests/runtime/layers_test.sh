#!/usr/bin/env bash
# The runtime's include rule (runtime/README.md, "Layers"): bottom-up base < residency < observe < plan < replay <
# session. A source file under runtime/LAYER/ may include runtime/ headers of its own layer or of layers below it,
# and of the project's other folders only ground/, policy/, solver/ and include/ (the public C API's types; system
# and CUDA headers are not checked).
# Every violation is printed as FILE:LINE and the include; the exit status is 1 if there is one.
#   layers_test.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: layers_test.sh SOURCE_DIR}
cd "$src" || exit 2
layers=(base residency observe plan replay session)
others_allowed=(ground policy solver include)  # include/: the public C API's types (karma.h)

rank() {  # rank LAYER: its position bottom-up, or -1 for a folder that is no layer
  local i
  for i in "${!layers[@]}"; do [[ ${layers[$i]} == "$1" ]] && { echo "$i"; return; }; done
  echo -1
}

include_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]+)[">]'
status=0 checked=0
while IFS= read -r -d '' file; do
  rel=${file#./}
  own=${rel#runtime/}
  own=${own%%/*}
  own_rank=$(rank "$own")
  if [[ $rel != runtime/*/* || $own_rank == -1 ]]; then
    echo "$rel: not in a layer folder (runtime/{$(IFS=,; echo "${layers[*]}")}/)"
    status=1
    continue
  fi
  checked=$((checked + 1))
  while IFS=: read -r line text; do
    [[ $text =~ $include_re ]] || continue
    inc=${BASH_REMATCH[1]}
    top=${inc%%/*}
    [[ $inc == */* && -d $top ]] || continue  # a system, CUDA or third-party header
    if [[ $top == runtime ]]; then
      to=${inc#runtime/}
      to=${to%%/*}
      to_rank=$(rank "$to")
      if ((to_rank == -1)); then
        echo "$rel:$line: includes $inc: runtime/$to/ is no layer"
        status=1
      elif ((to_rank > own_rank)); then
        echo "$rel:$line: includes $inc: $to is above $own (${layers[*]})"
        status=1
      fi
    elif [[ " ${others_allowed[*]} " != *" $top "* ]]; then
      echo "$rel:$line: includes $inc: runtime/ may use only ${others_allowed[*]} of the project's other folders"
      status=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$file")
done < <(find ./runtime -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cc' -o -name '*.cpp' -o -name '*.cu' \
  -o -name '*.cuh' -o -name '*.inc' \) -print0 | sort -z)

if ((checked == 0)); then
  echo "no source files under $src/runtime"
  exit 1
fi
((status == 0)) && echo "runtime layers: $checked files, every include goes to its own layer or below"
exit "$status"
