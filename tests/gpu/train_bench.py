#!/usr/bin/env python3
"""Trains a torchvision ResNet-50 or a GPT-2-style model for a few iterations and reports steady-state timing.

One run of the GPU suite (tests/gpu/run_gpu_suite.sh): the same program runs plain, under
LD_PRELOAD=libkarma.so (both allocator backends, KARMA_MODE=um) and with torch.utils.checkpoint; the suite
compares the JSON each run writes. Iteration times come from CUDA events around each iteration, warm-up
iterations excluded; peak memory from torch.cuda's allocator statistics; the losses of every iteration are
kept so that runs can be compared for agreement. Synthetic data from a seeded generator, deterministic
algorithms where PyTorch has them, no dropout: every configuration trains on the same numbers.

    train_bench.py --model resnet50 --batch 64 --iters 20 --warmup 5 --out r.json
    train_bench.py --model gpt2 --checkpoint --out g.json
    train_bench.py --model resnet50 --dry-run        # on the CPU, tiny sizes: checks the program, not the GPU

Exit codes: 0 done, 1 error, 2 out of memory, 64 bad command line. The JSON (--out) is written in every case.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

EXIT_ERROR, EXIT_OOM, EXIT_USAGE = 1, 2, 64


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["resnet50", "gpt2"], required=True)
    p.add_argument("--batch", type=int, help="samples per iteration (resnet50: 64, gpt2: 8; dry run: 2)")
    p.add_argument("--image", type=int, help="resnet50 input height and width (224; dry run: 64)")
    p.add_argument("--seq", type=int, help="gpt2 sequence length (1024; dry run: 32)")
    p.add_argument("--layers", type=int, help="gpt2 transformer layers (24; dry run: 2)")
    p.add_argument("--d-model", type=int, help="gpt2 model width (1024; dry run: 64)")
    p.add_argument("--heads", type=int, help="gpt2 attention heads (16; dry run: 4)")
    p.add_argument("--vocab", type=int, help="gpt2 vocabulary (50257; dry run: 512)")
    p.add_argument("--iters", type=int, help="timed iterations after the warm-up (20; dry run: 2)")
    p.add_argument("--warmup", type=int, help="iterations before timing starts (5; dry run: 1)")
    p.add_argument("--checkpoint", action="store_true",
                   help="recompute activations with torch.utils.checkpoint (per ResNet stage / transformer layer)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="profile the last N iterations with torch.profiler: prints the calls that took the most "
                        "host time (CUDA API calls, libkarma.so's own included) and stores them in the JSON")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--label", default="", help="configuration name stored in the JSON")
    p.add_argument("--out", help="write the result as JSON to this file")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU, tiny sizes unless given: builds the model and trains it, without a GPU")
    a = p.parse_args(argv)
    defaults = dict(batch=64 if a.model == "resnet50" else 8, image=224, seq=1024, layers=24, d_model=1024,
                    heads=16, vocab=50257, iters=20, warmup=5)
    if a.dry_run:
        defaults.update(batch=2, image=64, seq=32, layers=2, d_model=64, heads=4, vocab=512, iters=2, warmup=1)
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    for k in ("batch", "image", "seq", "layers", "d_model", "heads", "vocab", "iters"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be positive")
    if a.warmup < 0:
        p.error("--warmup must not be negative")
    if not 0 <= a.profile <= a.iters:
        p.error("--profile must be between 0 and --iters")
    if a.model == "gpt2" and a.d_model % a.heads != 0:
        p.error("--d-model must be a multiple of --heads")
    return a


def build_resnet50(torch, args):
    import torchvision

    model = torchvision.models.resnet50(weights=None) if hasattr(torchvision.models, "ResNet50_Weights") \
        else torchvision.models.resnet50(pretrained=False)

    stages = [model.layer1, model.layer2, model.layer3, model.layer4]

    def forward(x):
        x = model.maxpool(model.relu(model.bn1(model.conv1(x))))
        for stage in stages:
            if args.checkpoint:
                x = torch.utils.checkpoint.checkpoint(stage, x, use_reentrant=False)
            else:
                x = stage(x)
        return model.fc(torch.flatten(model.avgpool(x), 1))

    def batch(gen, device):
        x = torch.randn(args.batch, 3, args.image, args.image, generator=gen, device=device)
        y = torch.randint(0, 1000, (args.batch,), generator=gen, device=device)
        return x, y

    return model, forward, batch, torch.nn.CrossEntropyLoss()


class Gpt(object):
    """A GPT-2-style decoder: token and position embeddings, pre-norm TransformerEncoderLayers with a causal
    mask, a final LayerNorm and an LM head tied to the token embedding."""

    def __init__(self, torch, args):
        nn = torch.nn
        self.torch, self.args = torch, args
        self.tok = nn.Embedding(args.vocab, args.d_model)
        self.pos = nn.Embedding(args.seq, args.d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(args.d_model, args.heads, 4 * args.d_model, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(args.layers))
        self.norm = nn.LayerNorm(args.d_model)
        for e in (self.tok, self.pos):
            nn.init.normal_(e.weight, std=0.02)  # GPT-2's initialization: logits of order one at the start
        self.module = nn.ModuleDict(dict(tok=self.tok, pos=self.pos, blocks=self.blocks, norm=self.norm))

    def forward(self, tokens):
        torch = self.torch
        n = tokens.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=tokens.device), diagonal=1)
        h = self.tok(tokens) + self.pos(torch.arange(n, device=tokens.device))[None]
        for block in self.blocks:
            if self.args.checkpoint:
                h = torch.utils.checkpoint.checkpoint(block, h, mask, use_reentrant=False)
            else:
                h = block(h, src_mask=mask)
        return self.norm(h) @ self.tok.weight.t()


def build_gpt2(torch, args):
    gpt = Gpt(torch, args)
    ce = torch.nn.CrossEntropyLoss()

    def batch(gen, device):
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen, device=device)
        return tokens[:, :-1], tokens[:, 1:]

    def loss_fn(logits, target):
        return ce(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    return gpt.module, gpt.forward, batch, loss_fn


def environment(torch, device):
    env = {k: os.environ.get(k, "") for k in ("LD_PRELOAD", "KARMA_MODE", "KARMA_CAPACITY", "KARMA_ALLOCATORS",
                                              "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}
    info = {"torch": torch.__version__, "cuda": torch.version.cuda or "", "device": str(device), "env": env}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["device_bytes"] = torch.cuda.get_device_properties(device).total_memory
        # Which backend PyTorch really runs (libkarma.so sets it at load unless KARMA_ALLOCATORS=keep).
        backend = getattr(torch.cuda, "get_allocator_backend", None)
        info["allocator_backend"] = backend() if backend is not None else ""
    return info


def is_oom(e, torch):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower()


def start_profiler(torch, cuda):
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    prof = profile(activities=activities)
    prof.__enter__()
    return prof


def stop_profiler(prof, iterations, rows=25):
    """The calls that took the most host time over the profiled iterations (per iteration), printed and returned."""
    prof.__exit__(None, None, None)
    events = prof.key_averages()
    device_time = lambda e: getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    table = [dict(name=e.key, calls=e.count // iterations, self_host_ms=e.self_cpu_time_total / 1e3 / iterations,
                  self_device_ms=device_time(e) / 1e3 / iterations) for e in top]
    print(f"profile: the {rows} calls with the most host time, per iteration (of {iterations})")
    print(f"{'self host ms':>12}  {'device ms':>9}  {'calls':>6}  name")
    for r in table:
        print(f"{r['self_host_ms']:12.3f}  {r['self_device_ms']:9.3f}  {r['calls']:6d}  {r['name'][:90]}")
    return table


def train(torch, args, result):
    device = torch.device("cpu" if args.dry_run else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False: no usable GPU for PyTorch")
    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    result.update(environment(torch, device))
    build = build_resnet50 if args.model == "resnet50" else build_gpt2
    model, forward, make_batch, loss_fn = build(torch, args)
    model.to(device).train()
    result["parameters"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    losses, times_ms = [], []
    profiler = None
    for i in range(args.warmup + args.iters):
        if args.profile and i == args.warmup + args.iters - args.profile:
            profiler = start_profiler(torch, cuda)
        x, y = make_batch(gen, device)
        if cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)
        loss.backward()
        opt.step()
        if cuda:
            stop.record()
            stop.synchronize()
            ms = start.elapsed_time(stop)
        else:
            ms = 1e3 * (time.perf_counter() - t0)
        value = loss.item()
        losses.append(value)
        if i >= args.warmup:
            times_ms.append(ms)
        print(f"iter {i} loss {value:.9g} ms {ms:.3f}{' (warm-up)' if i < args.warmup else ''}", flush=True)
        if not math.isfinite(value):
            raise RuntimeError(f"loss is {value} at iteration {i}")
    if profiler is not None:
        result["profile"] = stop_profiler(profiler, args.profile)
    result.update(losses=losses, times_ms=times_ms, ms_mean=statistics.fmean(times_ms),
                  ms_median=statistics.median(times_ms))
    if cuda:
        result.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(device),
                      peak_reserved_bytes=torch.cuda.max_memory_reserved(device))
        free, total = torch.cuda.mem_get_info(device)
        # Device memory that is not PyTorch's tensors or cache: the context, modules, library handles (what a run
        # beside tests/gpu/occupy.py needs free on top of its tensors' budget).
        outside = total - free - torch.cuda.memory_reserved(device)
        result.update(mem_free_bytes=free, mem_total_bytes=total, outside_torch_bytes=max(outside, 0))


def main(argv):
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return 0 if e.code == 0 else EXIT_USAGE
    result = {"model": args.model, "label": args.label, "checkpoint": args.checkpoint, "dry_run": args.dry_run,
              "batch": args.batch, "iters": args.iters, "warmup": args.warmup, "status": "error"}
    if args.model == "resnet50":
        result["shape"] = f"batch {args.batch}, {args.image}x{args.image}"
    else:
        result["shape"] = (f"batch {args.batch}, seq {args.seq}, {args.layers} layers, d {args.d_model}, "
                           f"{args.heads} heads, vocab {args.vocab}")
    code = EXIT_ERROR
    # Deterministic cuBLAS needs this before CUDA starts (torch.use_deterministic_algorithms asks for it).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        import torch
        import torch.utils.checkpoint  # noqa: F401  (a submodule: not loaded by `import torch` everywhere)

        train(torch, args, result)
        result["status"], code = "ok", 0
    except ImportError as e:
        result["message"] = f"missing Python package: {e}"
    except Exception as e:  # the JSON must say what happened, whatever it was
        oom = "torch" in sys.modules and is_oom(e, sys.modules["torch"])
        result["status"], code = ("oom", EXIT_OOM) if oom else ("error", EXIT_ERROR)
        result["message"] = str(e).splitlines()[0] if str(e) else type(e).__name__
        traceback.print_exc()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    if code != 0:
        print(f"train_bench: {result['status']}: {result.get('message', '')}", file=sys.stderr)
    else:
        print(f"train_bench: {args.model} {args.label or 'run'}: {result['ms_mean']:.3f} ms per iteration "
              f"(mean of {args.iters}, {args.warmup} warm-up excluded)")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
