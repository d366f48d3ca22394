#!/usr/bin/python3
"""Record one steady-state training iteration of a PyTorch model as a karma-graph v1 file.

The model runs on meta tensors (shapes and dtypes only, no memory, no arithmetic) under a TorchDispatchMode
that sees every aten operator of the forward pass, the backward pass and the optimizer step, in execution
order. Buffers are storages: views share their base's storage, in-place operators read and write it. The
conventions follow ../../../shared/formats/karma-graph.md and the shared workloads: a view op names its
storage as written, FLOPs count 2 per multiply-add for convolutions and matrix products and one per element
otherwise, bytes are the sizes of all tensor arguments and results.

One iteration runs first, unrecorded, so that optimizer state exists; gradients are reset to None before the
recorded one (PyTorch 2's default), so the backward pass allocates them.

Usage:  tools/graphgen/graphgen.py MODEL [--batch N] [-o FILE]      (MODEL: see --help)
Needs Debian's python3-torch and python3-torchvision (run with /usr/bin/python3).
"""
import argparse
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

GEMMS = {"aten::mm": 0, "aten::bmm": 0, "aten::addmm": 1, "aten::baddbmm": 1}


def conv_backward_meta(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                       output_padding, groups, output_mask):
    """PyTorch 1.13 has no meta kernel for aten::convolution_backward: the gradients have their inputs' shapes."""
    grad_input = input.new_empty(input.shape) if output_mask[0] else None
    grad_weight = weight.new_empty(weight.shape) if output_mask[1] else None
    grad_bias = grad_output.new_empty(bias_sizes) if output_mask[2] and bias_sizes is not None else None
    return grad_input, grad_weight, grad_bias


META_KERNELS = torch.library.Library("aten", "IMPL", "Meta")
META_KERNELS.impl("convolution_backward", conv_backward_meta)


def numel_bytes(t):
    return t.numel() * t.element_size()


class Recorder(TorchDispatchMode):
    """Turns the aten calls it sees into karma-graph ops over storage-level buffers."""

    def __init__(self):
        super().__init__()
        self.ids = {}  # storage address -> buffer id
        self.alive = []  # every recorded tensor stays referenced, so no storage address is reused
        self.buffers = []
        self.ops = []
        self.phase = "forward"
        self.recording = False

    def buffer(self, t, kind=None):
        storage = t.storage()
        key = storage._cdata
        if key not in self.ids:
            self.ids[key] = len(self.buffers)
            self.buffers.append({"bytes": storage.nbytes(), "dtype": str(t.dtype).replace("torch.", ""),
                                 "kind": kind, "born": self.phase if self.recording else None})
            self.alive.append(t)
        elif kind is not None:
            self.buffers[self.ids[key]]["kind"] = kind
        return self.ids[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.recording:
            return out
        schema = func._schema
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        mutated = []
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = args[i] if i < len(args) else kwargs.get(arg.name)
                mutated += [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]
        reads = [self.buffer(t) for t in inputs]
        writes = [self.buffer(t) for t in outputs + mutated]
        is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
        if is_view:
            reads = [r for r in reads if r not in writes]
        self.ops.append({
            "name": schema.name,
            "phase": self.phase,
            "flops": flops_of(schema.name, args, inputs, outputs),
            "bytes": sum(numel_bytes(t) for t in inputs + outputs),
            "reads": list(dict.fromkeys(reads)),
            "writes": list(dict.fromkeys(writes)),
        })
        return out


def flops_of(name, args, inputs, outputs):
    # A convolution does prod(weight.shape[1:]) multiply-adds per output element; a transposed one per input
    # element. Its backward pass does that once for the input gradient and once for the weight gradient.
    if name == "aten::convolution":
        x, weight, transposed = args[0], args[1], args[6]
        return 2 * (x if transposed else outputs[0]).numel() * math.prod(weight.shape[1:])
    if name == "aten::convolution_backward":
        grad_out, x, weight, transposed, mask = args[0], args[1], args[2], args[7], args[-1]
        one = 2 * (x if transposed else grad_out).numel() * math.prod(weight.shape[1:])
        return one * (int(mask[0]) + int(mask[1]))
    if name in GEMMS:
        a = args[GEMMS[name]]
        return 2 * outputs[0].numel() * a.shape[-1]
    tensors = outputs or inputs
    return max((t.numel() for t in tensors), default=0)


# ---- models --------------------------------------------------------------------------------------------------

class UNet(nn.Module):
    """The classic U-Net: two 3x3 conv+BN+ReLU per level, max-pool down, transposed conv up, skip concat."""

    def __init__(self, channels=3, classes=8, base=32, depth=4):
        super().__init__()

        def double(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        widths = [base * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList([double(channels, widths[0])] +
                                  [double(widths[i], widths[i + 1]) for i in range(depth)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2)
                                 for i in reversed(range(depth))])
        self.merge = nn.ModuleList([double(2 * widths[i], widths[i]) for i in reversed(range(depth))])
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        skips.pop()
        for up, merge in zip(self.up, self.merge):
            x = merge(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


class LstmLm(nn.Module):
    """A word-level LSTM language model: embedding, stacked LSTM, tied-size decoder."""

    def __init__(self, vocab=10000, dim=1024, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, layers, batch_first=True)
        self.decode = nn.Linear(dim, vocab)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        return self.decode(h)


def image_task(model, batch, size, classes):
    x = torch.empty(batch, 3, size, size, device="meta")
    y = torch.empty(batch, dtype=torch.long, device="meta")
    return model, x, y, lambda out, y: F.cross_entropy(out, y)


def make(name, batch):
    """(model, input, target, loss) on the meta device, and the optimizer to use."""
    if name == "unet":
        model = UNet()
        x = torch.empty(batch, 3, 256, 256, device="meta")
        y = torch.empty(batch * 256 * 256, dtype=torch.long, device="meta")
        # Per-pixel classes, flattened (the meta backend has no 2-D NLL loss in 1.13).
        return model, x, y, lambda out, y: F.cross_entropy(out.permute(0, 2, 3, 1).reshape(-1, out.shape[1]), y), "sgd"
    if name == "lstm":
        model = LstmLm()
        x = torch.empty(batch, 32, dtype=torch.long, device="meta")
        y = torch.empty(batch * 32, dtype=torch.long, device="meta")
        return model, x, y, lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y), "adam"
    import torchvision
    models = {"mobilenet_v2": (torchvision.models.mobilenet_v2, 224),
              "efficientnet_b0": (torchvision.models.efficientnet_b0, 224),
              "vit_b_16": (torchvision.models.vit_b_16, 224),
              "densenet121": (torchvision.models.densenet121, 224),
              "inception_v3": (lambda: torchvision.models.inception_v3(aux_logits=False, init_weights=False), 299)}
    if name not in models:
        sys.exit(f"graphgen: unknown model '{name}'; known: unet, lstm, " + ", ".join(models))
    ctor, size = models[name]
    model, x, y, loss = image_task(ctor(), batch, size, 1000)
    return model, x, y, loss, "sgd"


MODELS = ["unet", "lstm", "mobilenet_v2", "densenet121", "inception_v3", "efficientnet_b0", "vit_b_16"]
DEFAULT_BATCH = {"unet": 32, "lstm": 256, "mobilenet_v2": 128, "densenet121": 64, "inception_v3": 64,
                 "efficientnet_b0": 96, "vit_b_16": 32}


def record(name, batch):
    model, x, y, loss_fn, opt_name = make(name, batch)
    model = model.to("meta")
    if opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rec = Recorder()

    def step():
        opt.zero_grad(set_to_none=True)
        rec.phase = "forward"
        loss = loss_fn(model(x), y)
        rec.phase = "backward"
        loss.backward()
        rec.phase = "optimizer"
        opt.step()

    with rec:
        step()  # warm-up: the optimizer creates its state
        for p in model.parameters():
            rec.buffer(p, "param")
        for b in model.buffers():
            rec.buffer(b, "other")
        rec.buffer(x, "input")
        rec.buffer(y, "input")
        for state in opt.state.values():
            for v in state.values():
                if isinstance(v, torch.Tensor):
                    rec.buffer(v, "state")
        rec.recording = True
        step()
        rec.recording = False
    for p in model.parameters():
        if p.grad is not None and p.grad.storage()._cdata in rec.ids:
            rec.buffers[rec.ids[p.grad.storage()._cdata]]["kind"] = "grad"
    for state in opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.storage()._cdata in rec.ids:
                rec.buffers[rec.ids[v.storage()._cdata]]["kind"] = "state"
    born_kind = {"forward": "activation", "backward": "temp", "optimizer": "temp", None: "other"}
    tensors = []
    for i, b in enumerate(rec.buffers):
        tensors.append({"id": i, "bytes": b["bytes"], "kind": b["kind"] or born_kind[b["born"]], "dtype": b["dtype"]})
    ops = [dict(id=i, **op) for i, op in enumerate(rec.ops)]
    return {
        "format": "karma-graph",
        "version": 1,
        "model": name,
        "batch": batch,
        "source": f"tools/graphgen/graphgen.py: torch {torch.__version__}, aten dispatch on meta tensors, "
                  f"steady-state iteration ({opt_name})",
        "tensors": tensors,
        "ops": ops,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--batch", type=int, help="mini-batch size (default: per model)")
    parser.add_argument("-o", "--output", help="write here instead of stdout")
    a = parser.parse_args()
    graph = record(a.model, a.batch or DEFAULT_BATCH[a.model])
    text = json.dumps(graph, separators=(",", ":")) + "\n"
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
        print(f"graphgen: {a.model}: {len(graph['ops'])} ops, {len(graph['tensors'])} buffers -> {a.output}",
              file=sys.stderr)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
