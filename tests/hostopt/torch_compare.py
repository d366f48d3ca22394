#!/usr/bin/env python3
"""The host optimizer against torch.optim itself, through the C API (ctypes), on the same data.

fp32: the same updates as torch's SGD/Adam/AdamW on the same tensors. bf16: torch's optimizer run on fp32
copies of the bf16 parameters with the bf16 gradients is what our master copy must follow, and our bf16
parameters are its rounding. Exit 77 (skipped) where this Python has no torch.
"""
import ctypes
import math
import os
import sys

try:
    import torch
except ImportError:
    print("torch is not installed for this Python: skipped")
    sys.exit(77)

SIZES = [1, 17, 1000, 4099]
STEPS = 25
U = 2.0 ** -24  # fp32 unit roundoff


# The C API's structures and signatures, from the Python helper (python/karma).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from karma.capi import Config, HParams, Tensor, declare  # noqa: E402

lib = declare(ctypes.CDLL(sys.argv[1]))


def check(status):
    if status != 0:
        raise RuntimeError(f"karma status {status}: {lib.karma_last_error().decode()}")


SGD, ADAM, ADAMW = 0, 1, 2
# name, torch class, torch kwargs, our algorithm
CASES = [
    ("sgd", torch.optim.SGD, dict(lr=0.05), SGD),
    ("sgd_momentum_dampening_wd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), SGD),
    ("sgd_nesterov_maximize", torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True), SGD),
    ("adam", torch.optim.Adam, dict(lr=0.01), ADAM),
    ("adam_wd_betas_eps", torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05), ADAM),
    ("adamw", torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1), ADAMW),
    ("adamw_maximize", torch.optim.AdamW, dict(lr=0.01, maximize=True), ADAMW),
]


def hparams(algorithm, kw):
    hp = HParams()
    lib.karma_opt_hparams_default(algorithm, ctypes.byref(hp))
    hp.lr = kw["lr"]
    hp.weight_decay = kw.get("weight_decay", 0.01 if algorithm == ADAMW else 0.0)
    hp.momentum = kw.get("momentum", 0.0)
    hp.dampening = kw.get("dampening", 0.0)
    hp.nesterov = int(kw.get("nesterov", False))
    hp.maximize = int(kw.get("maximize", False))
    hp.beta1, hp.beta2 = kw.get("betas", (0.9, 0.999))
    hp.eps = kw.get("eps", 1e-8)
    return hp


def float_view(address, n):
    return torch.frombuffer((ctypes.c_float * n).from_address(address), dtype=torch.float32)


def bound(algorithm, kw, ref, max_grad):
    # Both sides are fp32 implementations of the same formulas; they may differ in which products are fused
    # and so by a few roundings per step: per step 8u|p| plus 64u times the update scale (an Adam update is
    # at most ~3.2 lr; SGD with momentum 0.9 carries up to ~11 gradients).
    scale = 4.0 if algorithm != SGD else 11.0 * (max_grad + 1.0)
    return STEPS * (8 * U * ref.abs() + 64 * U * kw["lr"] * scale)


def run(name, cls, kw, algorithm, bf16):
    gen = torch.Generator().manual_seed(1234)
    start = [torch.randn(n, generator=gen) for n in SIZES]
    if bf16:
        ours = [p.to(torch.bfloat16) for p in start]
        ref = [p.float().requires_grad_() for p in ours]
    else:
        ours = [p.clone() for p in start]
        ref = [p.clone().requires_grad_() for p in start]
    topt = cls(ref, **kw)

    opt = ctypes.c_void_p()
    check(lib.karma_optimizer_create(ctypes.byref(Config(2, 0, 128)), ctypes.byref(opt)))
    group = ctypes.c_int32()
    check(lib.karma_optimizer_add_group(opt, ctypes.byref(hparams(algorithm, kw)), ctypes.byref(group)))
    for p in ours:
        t = Tensor()
        t.param = p.data_ptr()
        t.numel = p.numel()
        t.dtype = 1 if bf16 else 0
        check(lib.karma_optimizer_add_tensor(opt, group, ctypes.byref(t), None))

    max_grad = 0.0
    for _ in range(STEPS):
        grads = [torch.randn(n, generator=gen) for n in SIZES]
        if bf16:
            grads = [g.to(torch.bfloat16) for g in grads]
        max_grad = max(max_grad, max(g.float().abs().max().item() for g in grads))
        for p, g in zip(ref, grads):
            p.grad = g.float().clone()
        topt.step()
        for i, g in enumerate(grads):  # new gradient tensors each step, as with zero_grad(set_to_none=True)
            check(lib.karma_optimizer_set_pointers(opt, group, i, None, g.data_ptr()))
        check(lib.karma_optimizer_step(opt))

    worst, identical, total, ok = 0.0, 0, 0, True
    for i, (p, r) in enumerate(zip(ours, ref)):
        r = r.detach()
        if bf16:
            t = Tensor()
            check(lib.karma_optimizer_get_tensor(opt, group, i, ctypes.byref(t)))
            master = float_view(t.master, p.numel()).clone()
            # Our bf16 parameters are exactly the rounding of our master; that is within one bf16 step of torch's.
            if not torch.equal(p, master.to(torch.bfloat16)):
                print(f"{name} bf16: parameters are not the rounding of the master copy")
                ok = False
            ulp = torch.where(r == 0, torch.ones_like(r), r.abs()) * 2.0 ** -7
            if ((p.float() - r.to(torch.bfloat16).float()).abs() > ulp).any():
                print(f"{name} bf16: a parameter is more than one bf16 step from torch's")
                ok = False
            got = master
        else:
            got = p
        diff = (got - r).abs()
        b = bound(algorithm, kw, r, max_grad)
        worst = max(worst, (diff / b).max().item())
        identical += int((got == r).sum().item())
        total += r.numel()
    lib.karma_optimizer_destroy(opt)
    ok = ok and worst <= 1.0
    print(f"{name:28s} {'bf16' if bf16 else 'fp32'}  bit-identical {identical}/{total}  "
          f"worst difference {worst:.4f} of the bound  {'ok' if ok else 'FAIL'}")
    return ok


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {STEPS} steps, tensors of {SIZES} elements")
    results = [run(name, cls, kw, algorithm, bf16) for name, cls, kw, algorithm in CASES for bf16 in (False, True)]
    if not all(results):
        print("host optimizer differs from torch.optim")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
