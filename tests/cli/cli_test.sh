#!/usr/bin/env bash
# Command-line contract of karma-trace: figures on the real workloads, exit codes on bad input, outputs people open.
# Usage: cli_test.sh KARMA_TRACE DATA_DIR CASE
set -uo pipefail
kt=$1
data=$2
case_name=$3
source "$(dirname "${BASH_SOURCE[0]}")/../common/cli_lib.sh"

# expect_error DESCRIPTION CMD...: the command must fail with 0 < code < 128 and say something on stderr.
expect_error() {
  local what=$1
  shift
  "$@" >"$work/out" 2>"$work/err"
  local code=$?
  if ((code == 0 || code >= 128)); then
    fail "$what: exit code $code"
  elif [[ ! -s $work/err ]]; then
    fail "$what: no message on stderr"
  else
    echo "ok   $what (exit $code): $(head -c 200 "$work/err")"
  fi
}

json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d[sys.argv[2]])" "$@"; }

case $case_name in
  workload_figures)
    while read -r file ops peak; do
      "$kt" summary "$data/workloads/$file" --json >"$work/s.json" || fail "summary $file"
      got_ops=$(json_get "$work/s.json" ops)
      got_peak=$(python3 -c "import json; print(json.load(open('$work/s.json'))['ideal_peak_bytes'] / 2**30)")
      [[ $got_ops == "$ops" ]] || fail "$file: ops $got_ops, expected $ops"
      python3 -c "import sys; sys.exit(abs($got_peak - $peak) > 0.1)" || fail "$file: peak $got_peak GiB, expected $peak"
      echo "ok   $file: ops $got_ops, ideal peak $got_peak GiB"
    done <<'LIST'
resnet50-b128.json 1536 10.62
vgg16-b64.json 339 5.94
gpt2small-b8-s1024.json 4138 24.87
LIST
    ;;

  import_roundtrip)
    for file in resnet50-b128 vgg16-b64 gpt2small-b8-s1024; do
      "$kt" import "$data/workloads/$file.json" -o "$work/$file.ktrace" >/dev/null || fail "import $file"
      "$kt" summary "$data/workloads/$file.json" --json | grep -v '"file"\|"format"' >"$work/a"
      "$kt" summary "$work/$file.ktrace" --json | grep -v '"file"\|"format"' >"$work/b"
      diff "$work/a" "$work/b" >/dev/null || fail "$file: summary differs after import"
      "$kt" export "$work/$file.ktrace" --json "$work/$file.back.json" >/dev/null || fail "export $file"
      "$kt" import "$work/$file.back.json" -o "$work/$file.back.ktrace" >/dev/null || fail "re-import $file"
      cmp -s "$work/$file.ktrace" "$work/$file.back.ktrace" || fail "$file: .ktrace differs after JSON round trip"
      echo "ok   $file: JSON -> .ktrace -> JSON -> .ktrace is lossless"
    done
    ;;

  bad_inputs)
    src=$data/workloads/vgg16-b64.json
    "$kt" import "$src" -o "$work/good.ktrace" >/dev/null
    size=$(stat -c %s "$work/good.ktrace")
    head -c $((size / 2)) "$work/good.ktrace" >"$work/half.ktrace"
    expect_error "truncated .ktrace (half)" "$kt" summary "$work/half.ktrace"
    head -c $((size - 1)) "$work/good.ktrace" >"$work/minus1.ktrace"
    expect_error "truncated .ktrace (one byte short)" "$kt" summary "$work/minus1.ktrace"
    head -c 12 "$work/good.ktrace" >"$work/header.ktrace"
    expect_error "truncated .ktrace (inside the header)" "$kt" summary "$work/header.ktrace"
    for pos in 9 20 1000 $((size / 2)) $((size - 3)); do
      cp "$work/good.ktrace" "$work/flip.ktrace"
      printf '\xff' | dd of="$work/flip.ktrace" bs=1 seek="$pos" conv=notrunc status=none
      expect_error "flipped byte at $pos" "$kt" summary "$work/flip.ktrace"
    done
    python3 - "$src" "$work" <<'PY'
import json, sys
src, work = sys.argv[1], sys.argv[2]
g = json.load(open(src))
def write(name, doc):
    with open(f"{work}/{name}.json", "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
import copy
b = copy.deepcopy(g); b["tensors"][3]["bytes"] = "lots"; write("wrong_type", b)
b = copy.deepcopy(g); b["ops"][5]["reads"] = [99999]; write("dangling", b)
b = copy.deepcopy(g); b["tensors"][40]["bytes"] = -4096; write("negative", b)
b = copy.deepcopy(g); b["version"] = 2; write("newer", b)
write("unterminated", json.dumps(g)[:-200])
write("empty", "")
PY
    for name in wrong_type dangling negative newer unterminated empty; do
      expect_error "karma-graph: $name" "$kt" summary "$work/$name.json"
      expect_error "karma-graph import: $name" "$kt" import "$work/$name.json" -o "$work/x.ktrace"
    done
    grep -q "version 2 is newer than this build supports (version 1)" <("$kt" summary "$work/newer.json" 2>&1) ||
      fail "newer-version message does not name both versions"
    [[ ! -e $work/x.ktrace ]] || fail "a failed import left an output file"
    expect_error "missing file" "$kt" summary "$work/does-not-exist.ktrace"
    expect_error "directory" "$kt" summary "$work"
    ;;

  usage)
    "$kt" --help >/dev/null || fail "--help"
    for sub in summary ops buffers memory import export env; do
      "$kt" "$sub" --help >"$work/help" 2>&1 || fail "$sub --help exit code"
      grep -qi "usage" "$work/help" || fail "$sub --help prints no usage"
    done
    "$kt" frobnicate >/dev/null 2>&1
    [[ $? == 2 ]] || fail "unknown subcommand should exit 2"
    "$kt" >/dev/null 2>&1
    [[ $? == 2 ]] || fail "no subcommand should exit 2"
    "$kt" ops "$data/workloads/vgg16-b64.json" --sort sideways >/dev/null 2>&1
    [[ $? == 2 ]] || fail "bad --sort should exit 2"
    expect_error "unknown gpu profile" "$kt" ops "$data/workloads/vgg16-b64.json" --gpu k80
    expect_error "export without an output" "$kt" export "$data/workloads/vgg16-b64.json"
    expect_error "memory with a bad capacity" "$kt" memory "$data/workloads/vgg16-b64.json" --capacity 3XB
    ;;

  env)
    env -i PATH="$PATH" "$kt" env >"$work/env" || fail "env"
    for v in KARMA_CAPACITY KARMA_MODE KARMA_TRACE_DIR KARMA_LOG; do
      grep -q "^$v " "$work/env" || fail "env does not list $v"
    done
    env -i PATH="$PATH" KARMA_CAPACITY=16GiB KARMA_MODE=um "$kt" env --check >/dev/null || fail "valid values rejected"
    env -i PATH="$PATH" KARMA_CAPACITY=0.8 "$kt" env --check >/dev/null || fail "fraction rejected"
    expect_error "KARMA_CAPACITY=12XB" env -i PATH="$PATH" KARMA_CAPACITY=12XB "$kt" env --check
    grep -q "KARMA_CAPACITY='12XB'.*512MiB.*0.8" "$work/err" || fail "message does not name the variable and forms"
    expect_error "KARMA_MODE=fast" env -i PATH="$PATH" KARMA_MODE=fast "$kt" env --check
    expect_error "misspelt variable" env -i PATH="$PATH" KARMA_CAPACTY=1GiB "$kt" env --check
    env -i PATH="$PATH" "$kt" env --json | python3 -c "import json,sys; d=json.load(sys.stdin); assert len(d['variables']) >= 4" ||
      fail "env --json"
    ;;

  pictures)
    "$kt" memory "$data/workloads/resnet50-b128.json" --svg "$work/m.svg" --capacity 5GiB >/dev/null || fail "memory --svg"
    python3 - "$work/m.svg" <<'PY' || fail "SVG content"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
for want in ["live memory (GiB)", "op (execution order)", "forward", "backward", "optimizer", "peak 10.62 GiB", "capacity 5.00 GiB"]:
    assert want in text, want
paths = list(root.iter("{http://www.w3.org/2000/svg}path"))
assert paths and len(paths[0].get("d")) > 1000, "no memory curve"
print("ok   SVG has axes, phases, peak, capacity and the curve")
PY
    "$kt" memory "$data/traces/skipnet-256mib-planning.json" --svg "$work/s.svg" >/dev/null || fail "memory --svg, small"
    python3 - "$work/s.svg" <<'PY' || fail "SVG of a small iteration"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
text = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
assert "live memory (MiB)" in text and "300" in text and "0.1" not in text, text
print("ok   an iteration under 1 GiB is charted in MiB")
PY
    "$kt" export "$data/workloads/resnet50-b128.json" --chrome "$work/t.json" >/dev/null || fail "export --chrome"
    python3 - "$work/t.json" <<'PY' || fail "Chrome trace content"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert len(x) == 1536, len(x)
assert all(e["dur"] >= 0 and "ts" in e for e in x)
assert all(a["ts"] <= b["ts"] for a, b in zip(x, x[1:]))
total_ms = (x[-1]["ts"] + x[-1]["dur"]) / 1000
assert abs(total_ms - 325.9) < 0.1, total_ms
assert any(e["ph"] == "C" for e in ev)
print(f"ok   Chrome trace: {len(x)} ops over {total_ms:.1f} ms")
PY
    ;;

  *) echo "unknown case $case_name"; exit 2 ;;
esac
cli_finish
