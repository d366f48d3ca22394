#!/usr/bin/env python3
"""Checks the convolutions of conv_trainer iterations recorded by libkarma.so (karma-graph JSON exports).

    check_conv_trace.py LEGACY.json BACKEND.json --batch N --width C --depth D --image S

LEGACY.json was recorded with --cudnn-api legacy, BACKEND.json with --cudnn-api backend, both with --alloc async
(one buffer per tensor). In the legacy trace every convolution is a library op with exact operands: forward
x, w -> y; backward data dy, w -> dx; backward filter x, dy -> dw; the workspace read and written; sizes and
flops those of the layer. The backend trace must show the same ops with the same operands and work.
"""
import argparse
import json
import sys


def layers(batch, width, depth, image):
    """Per layer: bytes of x, w, y and the forward flops, following conv_trainer's architecture."""
    out, size = [], image
    for l in range(depth):
        cin = 3 if l == 0 else width
        stride = 2 if l == depth // 2 and l > 0 and size >= 8 else 1
        so = (size - 1) // stride + 1
        out.append({
            "x": batch * cin * size * size * 4,
            "w": width * cin * 9 * 4,
            "y": batch * width * so * so * 4,
            "flops": 2 * batch * width * so * so * cin * 9,
        })
        size = so
    return out


class Checker:
    def __init__(self, path):
        with open(path) as f:
            d = json.load(f)
        self.ops = d["ops"]
        self.tensors = {t["id"]: t for t in d["tensors"]}
        self.errors = []

    def fail(self, op, message):
        self.errors.append(f"op {op['id']} {op['name']}: {message}")

    def operands(self, op):
        """(reads, writes, workspace) without the workspace, which must be read and written."""
        ws = [b for b in op.get("reads", []) + op.get("writes", []) if self.tensors[b]["kind"] == "workspace"]
        ws = sorted(set(ws))
        if len(ws) != 1:
            self.fail(op, f"expected one workspace buffer, got {ws}")
        elif ws[0] not in op.get("reads", []) or ws[0] not in op.get("writes", []):
            self.fail(op, "the workspace must be read and written")
        if op.get("touches"):
            self.fail(op, f"operands of unknown direction: {op['touches']}")
        reads = [b for b in op.get("reads", []) if b not in ws]
        writes = [b for b in op.get("writes", []) if b not in ws]
        if len(reads) != 2 or len(writes) != 1 or set(reads) & set(writes):
            self.fail(op, f"expected two inputs and one output, got reads {reads} writes {writes}")
        return reads, writes

    def size(self, b):
        return self.tensors[b]["bytes"]


def check_legacy(c, geometry):
    convs = [op for op in c.ops if op["name"].startswith("cudnnConvolution")]
    depth = len(geometry)
    fwd = [op for op in convs if op["name"] == "cudnnConvolutionForward"]
    bwd_filter = [op for op in convs if op["name"] == "cudnnConvolutionBackwardFilter"]
    bwd_data = [op for op in convs if op["name"] == "cudnnConvolutionBackwardData"]
    if (len(fwd), len(bwd_filter), len(bwd_data)) != (depth, depth, depth - 1):
        c.errors.append(f"expected {depth} forward, {depth} backward-filter and {depth - 1} backward-data "
                        f"convolutions, got {len(fwd)}, {len(bwd_filter)}, {len(bwd_data)}")
        return
    # (ops in layer order, inputs, output, text): forward in layer order, the backward passes in reverse.
    passes = [(list(enumerate(fwd)), ("x", "w"), "y", "x, w -> y"),
              ([(depth - 1 - i, op) for i, op in enumerate(bwd_filter)], ("x", "y"), "w", "x, dy -> dw"),
              ([(depth - 1 - i, op) for i, op in enumerate(bwd_data)], ("w", "y"), "x", "dy, w -> dx")]
    forward_inputs = {}  # layer -> {"x": buffer, "w": buffer} of its forward convolution
    for ops, inputs, output, text in passes:
        for l, op in ops:
            g = geometry[l]
            reads, writes = c.operands(op)
            if len(reads) != 2 or len(writes) != 1:
                continue
            if sorted(map(c.size, reads)) != sorted(g[k] for k in inputs) or c.size(writes[0]) != g[output]:
                c.fail(op, f"layer {l}: {text} sizes {g}, got reads {list(map(c.size, reads))} "
                           f"writes {c.size(writes[0])}")
                continue
            if op["flops"] != g["flops"]:
                c.fail(op, f"flops {op['flops']}, expected {g['flops']}")
            if output == "y":
                by_size = {c.size(b): b for b in reads}
                forward_inputs[l] = {"x": by_size[g["x"]], "w": by_size[g["w"]]}
                continue
            # The backward passes read what the forward pass read: its input (filter gradient), its filter (data).
            kept = forward_inputs.get(l, {}).get("x" if output == "w" else "w")
            if kept is not None and kept not in reads:
                c.fail(op, f"layer {l}: does not read buffer {kept} of the forward convolution")
            if output == "w" and c.tensors[writes[0]]["kind"] in ("activation", "temp", "workspace"):
                c.fail(op, "dw must be a persistent buffer")


# A backend convolution is named by its pass, as the legacy call is by its function.
BACKEND_NAMES = {
    "cudnnConvolutionForward": "cudnnBackendExecute (convolution forward)",
    "cudnnConvolutionBackwardData": "cudnnBackendExecute (convolution backward data)",
    "cudnnConvolutionBackwardFilter": "cudnnBackendExecute (convolution backward filter)",
}


def check_same(legacy, backend):
    if len(legacy.ops) != len(backend.ops):
        backend.errors.append(f"{len(backend.ops)} ops, the legacy trace has {len(legacy.ops)}")
        return
    for a, b in zip(legacy.ops, backend.ops):
        name = BACKEND_NAMES.get(a["name"], a["name"])
        if b["name"] != name:
            backend.fail(b, f"expected {name}")
        for key in ("kind", "reads", "writes", "touches", "flops", "bytes"):
            if a.get(key) != b.get(key):
                backend.fail(b, f"{key} {b.get(key)}, the legacy op has {a.get(key)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("legacy")
    p.add_argument("backend")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--width", type=int, required=True)
    p.add_argument("--depth", type=int, required=True)
    p.add_argument("--image", type=int, required=True)
    a = p.parse_args()
    geometry = layers(a.batch, a.width, a.depth, a.image)
    legacy, backend = Checker(a.legacy), Checker(a.backend)
    check_legacy(legacy, geometry)
    check_same(legacy, backend)
    errors = legacy.errors + backend.errors
    for e in errors[:20]:
        print("FAIL:", e)
    convs = sum(op["name"].startswith("cudnnConvolution") for op in legacy.ops)
    print(f"{convs} convolutions checked in each trace, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
