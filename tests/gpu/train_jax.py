#!/usr/bin/env python3
"""Trains a GPT-2-style decoder written in jax.numpy for a few iterations and reports steady-state timing.

The GPU suite's JAX model (tests/gpu/run_gpu_suite.sh --models jax), beside train_bench.py and with its command
line and JSON: the same program runs plain (XLA's BFC allocator, preallocated) and under libkarma.so, which sets
XLA_PYTHON_CLIENT_ALLOCATOR=platform and XLA_PYTHON_CLIENT_PREALLOCATE=false at load (per-buffer allocations); the
JSON records what the run saw. jax.numpy only (no flax, no optax): token and position embeddings, pre-norm blocks
(causal multi-head attention, GELU MLP), a final LayerNorm, an LM head tied to the token embedding, SGD with
momentum by hand, one jax.jit step (jax.value_and_grad, parameters and momentum donated) compiled before the first
iteration. Iteration times are wall clock up to block_until_ready on the step's loss, warm-up excluded; peak
memory from the device's memory_stats() (XLA's BFC allocator; the platform allocator keeps none). Random tokens
from a seeded key, drawn on the device inside the step: every configuration trains on the same numbers.

    train_jax.py --batch 4 --layers 6 --iters 16 --warmup 8 --out j.json
    train_jax.py --checkpoint --out j.json          # jax.checkpoint per layer
    train_jax.py --dry-run                          # on the CPU (JAX_PLATFORMS=cpu), tiny sizes

Exit codes: 0 done, 1 error, 2 out of memory, 3 jax cannot be imported (MISSING: jax), 64 bad command line. The
JSON (--out) is written in every case but 64.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
import warnings

EXIT_ERROR, EXIT_OOM, EXIT_MISSING, EXIT_USAGE = 1, 2, 3, 64
LR, MOMENTUM = 0.01, 0.9  # train_bench.py's SGD
# What decides XLA's device allocator (libkarma.so sets the first two at load unless KARMA_ALLOCATORS=keep).
XLA_ENV = ("XLA_PYTHON_CLIENT_ALLOCATOR", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
           "XLA_FLAGS", "JAX_PLATFORMS")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, help="sequences per iteration (8; dry run: 2)")
    p.add_argument("--seq", type=int, help="sequence length (1024; dry run: 32)")
    p.add_argument("--layers", type=int, help="transformer layers (24; dry run: 2)")
    p.add_argument("--d-model", type=int, help="model width (1024; dry run: 64)")
    p.add_argument("--heads", type=int, help="attention heads (16; dry run: 4)")
    p.add_argument("--vocab", type=int, help="vocabulary (50257; dry run: 512)")
    p.add_argument("--iters", type=int, help="timed iterations after the warm-up (20; dry run: 2)")
    p.add_argument("--warmup", type=int, help="iterations before timing starts (5; dry run: 1)")
    p.add_argument("--checkpoint", action="store_true", help="recompute each layer's activations (jax.checkpoint)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--label", default="", help="configuration name stored in the JSON")
    p.add_argument("--out", help="write the result as JSON to this file")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU (JAX_PLATFORMS=cpu), tiny sizes unless given: builds the model and trains it, "
                        "without a GPU")
    a = p.parse_args(argv)
    defaults = dict(batch=8, seq=1024, layers=24, d_model=1024, heads=16, vocab=50257, iters=20, warmup=5)
    if a.dry_run:
        defaults.update(batch=2, seq=32, layers=2, d_model=64, heads=4, vocab=512, iters=2, warmup=1)
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    for k in ("batch", "seq", "layers", "d_model", "heads", "vocab", "iters"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be positive")
    if a.warmup < 0:
        p.error("--warmup must not be negative")
    if a.d_model % a.heads != 0:
        p.error("--d-model must be a multiple of --heads")
    return a


def allocator_text():
    """XLA's device allocator as the environment chooses it (JAX reads these when its GPU backend starts)."""
    alloc, pre = (os.environ.get(k, "") for k in XLA_ENV[:2])
    if not alloc and not pre:
        return "XLA default (BFC, preallocated)"
    return " ".join(f"{k}={os.environ[k]}" for k in XLA_ENV[:2] if os.environ.get(k))


def init_params(jax, jnp, a, key):
    d = a.d_model
    normal = lambda k, shape: 0.02 * jax.random.normal(k, shape, jnp.float32)  # GPT-2's initialization
    zeros, ones = (lambda n: jnp.zeros((n,), jnp.float32)), (lambda n: jnp.ones((n,), jnp.float32))

    def layer(k):
        k1, k2, k3, k4 = jax.random.split(k, 4)
        return dict(ln1_g=ones(d), ln1_b=zeros(d), qkv_w=normal(k1, (d, 3 * d)), qkv_b=zeros(3 * d),
                    proj_w=normal(k2, (d, d)), proj_b=zeros(d), ln2_g=ones(d), ln2_b=zeros(d),
                    fc_w=normal(k3, (d, 4 * d)), fc_b=zeros(4 * d), out_w=normal(k4, (4 * d, d)), out_b=zeros(d))

    keys = jax.random.split(key, a.layers + 2)
    return dict(tok=normal(keys[0], (a.vocab, d)), pos=normal(keys[1], (a.seq, d)),
                layers=[layer(k) for k in keys[2:]], ln_g=ones(d), ln_b=zeros(d))


def make_step(jax, jnp, a):
    """step(params, momentum, key) -> (params, momentum, loss, next key): one batch drawn on the device, the loss
    and its gradient, SGD with momentum (PyTorch's form: m = 0.9 m + g, p -= lr m)."""
    heads, dh = a.heads, a.d_model // a.heads

    def layer_norm(x, g, b):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g + b

    def block(p, h, mask):
        b, n, d = h.shape
        x = layer_norm(h, p["ln1_g"], p["ln1_b"])
        q, k, v = jnp.split(x @ p["qkv_w"] + p["qkv_b"], 3, axis=-1)
        q, k, v = (t.reshape(b, n, heads, dh) for t in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dh)
        att = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
        h = h + jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, n, d) @ p["proj_w"] + p["proj_b"]
        x = layer_norm(h, p["ln2_g"], p["ln2_b"])
        return h + jax.nn.gelu(x @ p["fc_w"] + p["fc_b"]) @ p["out_w"] + p["out_b"]

    layer = jax.checkpoint(block) if a.checkpoint else block

    def loss_fn(params, tokens):
        x, y = tokens[:, :-1], tokens[:, 1:]
        n = x.shape[1]
        mask = jnp.tril(jnp.ones((n, n), dtype=bool))
        h = params["tok"][x] + params["pos"][None, :n]
        for p in params["layers"]:
            h = layer(p, h, mask)
        logits = layer_norm(h, params["ln_g"], params["ln_b"]) @ params["tok"].T
        # Cross-entropy with the target picked by a one-hot product: XLA fuses it, and its gradient is elementwise.
        picked = jnp.sum(logits * jax.nn.one_hot(y, a.vocab, dtype=logits.dtype), axis=-1)
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)

    def step(params, momentum, key):
        key, sub = jax.random.split(key)
        tokens = jax.random.randint(sub, (a.batch, a.seq + 1), 0, a.vocab)
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        momentum = jax.tree_util.tree_map(lambda m, g: MOMENTUM * m + g, momentum, grads)
        params = jax.tree_util.tree_map(lambda w, m: w - LR * m, params, momentum)
        return params, momentum, loss, key

    return step


def cuda_mem_info(ordinal):
    """(free, total) bytes of the device from the driver (cuMemGetInfo in the primary context XLA uses), or None."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), ordinal) or \
                cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev):
            return None
        try:
            if cuda.cuCtxPushCurrent_v2(ctx):
                return None
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            rc = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
            cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
            return (free.value, total.value) if rc == 0 else None
        finally:
            cuda.cuDevicePrimaryCtxRelease_v2(dev)
    except (OSError, AttributeError):
        return None


def memory_stats(device):
    try:
        stats = device.memory_stats()
    except Exception:  # some backends and versions raise where they keep none
        return None
    return {k: int(v) for k, v in stats.items()} if stats else None


def train(jax, args, result):
    import jax.lax  # noqa: F401  (the submodules used, loaded whatever `import jax` loads in this version)
    import jax.nn  # noqa: F401
    import jax.numpy as jnp
    import jax.random  # noqa: F401
    import jax.tree_util  # noqa: F401

    device = jax.devices()[0]
    result.update(jax=jax.__version__, backend=jax.default_backend(), device=str(device),
                  device_name=getattr(device, "device_kind", ""))
    if not args.dry_run and device.platform != "gpu":
        raise RuntimeError(f"JAX's default device is {device} (backend {jax.default_backend()}): no GPU for JAX")
    # Donation is not implemented on every backend (the CPU's, in some versions): it warns and copies there.
    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
    key = jax.random.PRNGKey(args.seed)
    init_key, data_key = jax.random.split(key)
    params = jax.jit(lambda k: init_params(jax, jnp, args, k))(init_key)
    momentum = jax.tree_util.tree_map(jnp.zeros_like, params)
    result["parameters"] = sum(int(math.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))
    t0 = time.perf_counter()
    step = jax.jit(make_step(jax, jnp, args), donate_argnums=(0, 1)).lower(params, momentum, data_key).compile()
    result["compile_ms"] = 1e3 * (time.perf_counter() - t0)
    print(f"compiled in {result['compile_ms']:.0f} ms", flush=True)
    losses, times_ms = [], []
    key = data_key
    for i in range(args.warmup + args.iters):
        t0 = time.perf_counter()
        params, momentum, loss, key = step(params, momentum, key)
        loss.block_until_ready()  # one execution: its outputs are ready together
        ms = 1e3 * (time.perf_counter() - t0)
        value = float(loss)
        losses.append(value)
        if i >= args.warmup:
            times_ms.append(ms)
        print(f"iter {i} loss {value:.9g} ms {ms:.3f}{' (warm-up)' if i < args.warmup else ''}", flush=True)
        if not math.isfinite(value):
            raise RuntimeError(f"loss is {value} at iteration {i}")
    result.update(losses=losses, times_ms=times_ms, ms_mean=statistics.fmean(times_ms),
                  ms_median=statistics.median(times_ms))
    stats = memory_stats(device)
    if stats:
        # XLA's BFC allocator counts from the start (no reset): initialization and autotuning are in the peak.
        result["memory_stats"] = stats
        result.update(peak_allocated_bytes=stats.get("peak_bytes_in_use", 0),
                      peak_reserved_bytes=stats.get("peak_pool_bytes", 0))
    if device.platform == "gpu":
        ordinal = getattr(device, "local_hardware_id", None)
        info = cuda_mem_info(device.id if ordinal is None else ordinal)
        if info:
            free, total = info
            result.update(mem_free_bytes=free, mem_total_bytes=total, device_bytes=total)
            if stats and "pool_bytes" in stats:
                # Device memory beyond XLA's pool: the context, loaded modules, library handles (what a run beside
                # tests/gpu/occupy.py needs free on top of its buffers' budget; train_bench.py's outside_torch_bytes).
                result["outside_allocator_bytes"] = max(total - free - stats["pool_bytes"], 0)


def is_oom(e):
    text = str(e)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def main(argv):
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return 0 if e.code == 0 else EXIT_USAGE
    result = {"model": "jax", "framework": "jax", "label": args.label, "checkpoint": args.checkpoint,
              "dry_run": args.dry_run, "batch": args.batch, "iters": args.iters, "warmup": args.warmup,
              "status": "error", "timing": "wall clock to block_until_ready",
              "shape": (f"batch {args.batch}, seq {args.seq}, {args.layers} layers, d {args.d_model}, "
                        f"{args.heads} heads, vocab {args.vocab}")}
    if args.dry_run:
        os.environ["JAX_PLATFORMS"] = "cpu"  # before jax is imported: no GPU backend is tried
    result["env"] = {k: os.environ.get(k, "") for k in ("LD_PRELOAD", "KARMA_MODE", "KARMA_CAPACITY",
                                                         "KARMA_ALLOCATORS") + XLA_ENV}
    if not args.dry_run:
        result["allocator_backend"] = allocator_text()
    code = EXIT_ERROR
    try:
        import jax
    except Exception as e:  # ImportError, or a jaxlib that does not match
        result["status"], code = "missing", EXIT_MISSING
        result["message"] = f"jax cannot be imported: {type(e).__name__}: {e}"
        print(f"train_jax: MISSING: jax ({type(e).__name__}: {e})", file=sys.stderr)
        jax = None
    if jax is not None:
        try:
            train(jax, args, result)
            result["status"], code = "ok", 0
        except Exception as e:  # the JSON must say what happened, whatever it was
            result["status"], code = ("oom", EXIT_OOM) if is_oom(e) else ("error", EXIT_ERROR)
            result["message"] = str(e).splitlines()[0] if str(e) else type(e).__name__
            traceback.print_exc()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    if code == 0:
        print(f"train_jax: {args.label or 'run'}: {result['ms_mean']:.3f} ms per iteration "
              f"(mean of {args.iters}, {args.warmup} warm-up excluded)")
    elif code != EXIT_MISSING:
        print(f"train_jax: {result['status']}: {result.get('message', '')}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
