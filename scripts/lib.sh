# Shared by the scripts: configure and build one tree. Source it; do not run it.

KARMA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# karma_build DIR [cmake -D options...]: configure (once) and build DIR with every core.
karma_build() {
  local dir=$1
  shift
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [[ ! -f "$dir/CMakeCache.txt" ]]; then
    cmake -S "$KARMA_ROOT" -B "$dir" "${gen[@]}" "$@" >/dev/null
  else
    cmake -S "$KARMA_ROOT" -B "$dir" "$@" >/dev/null
  fi
  cmake --build "$dir" --parallel "$(nproc)"
}
