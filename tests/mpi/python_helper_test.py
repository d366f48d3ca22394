#!/usr/bin/env python3
"""python/karma's HostOptimizer against torch.optim itself: the same model trained on the same data with
torch's SGD / Adam / AdamW and with the registered copy running on KARMA's host optimizer. On this machine's
torch 1.13 the parameters and the optimizer state are equal bit for bit (mpi_shim/host_optimizer/README.md).

  python_helper_test.py LIBKARMA_MPI      exit 77 (skipped) without torch
"""
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

try:
    import torch
except ImportError:
    print("torch is not installed for this Python: skipped")
    sys.exit(77)

import karma  # noqa: E402

STEPS = 12
CASES = [
    ("sgd momentum nesterov wd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    ("sgd momentum dampening", torch.optim.SGD, dict(lr=0.05, momentum=0.8, dampening=0.2)),
    ("adam wd", torch.optim.Adam, dict(lr=1e-2, weight_decay=1e-2)),
    ("adamw maximize", torch.optim.AdamW, dict(lr=1e-2, maximize=True)),
]


def model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(33, 64), torch.nn.Tanh(), torch.nn.Linear(64, 5))


def train(net, step, zero_grad, data):
    for i, (x, y) in enumerate(data):
        zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        step()
        if i == STEPS // 2:  # a learning-rate schedule: read from param_groups at every step
            yield


def run(name, cls, kw, lib):
    torch.manual_seed(11)
    data = [(torch.randn(16, 33), torch.randn(16, 5)) for _ in range(STEPS)]
    ref, ours = model(), model()
    ref_opt, our_opt = cls(ref.parameters(), **kw), cls(ours.parameters(), **kw)
    host = karma.HostOptimizer(our_opt, lib=lib, threads=2)
    for opt, net, step in ((ref_opt, ref, ref_opt.step), (our_opt, ours, host.step)):
        # set_to_none: new gradient tensors every step, which step() must pick up.
        for _ in train(net, step, lambda: opt.zero_grad(set_to_none=True), data):
            for g in opt.param_groups:
                g["lr"] *= 0.5
    ok = True
    for (n, a), b in zip(ref.named_parameters(), ours.parameters()):
        if not torch.equal(a, b):
            print(f"{name}: parameter {n} differs by up to {(a - b).abs().max().item():.3g}")
            ok = False
        sa, sb = ref_opt.state[a], our_opt.state[b]
        if set(sa) != set(sb):
            print(f"{name}: state keys {sorted(sa)} vs {sorted(sb)}")
            ok = False
        for key in sa:
            if not torch.equal(torch.as_tensor(sa[key]), torch.as_tensor(sb[key])):
                print(f"{name}: state {key} of {n} differs")
                ok = False
    host.close()
    print(f"{name:28s} {'identical parameters and state' if ok else 'FAIL'}")
    return ok


def main():
    lib = karma.load(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"torch {torch.__version__}, {STEPS} steps")
    results = [run(name, cls, kw, lib) for name, cls, kw in CASES]
    # What is not supported says so.
    net = model()
    try:
        karma.HostOptimizer(torch.optim.Adam(net.parameters(), amsgrad=True), lib=lib)
        print("amsgrad was accepted")
        results.append(False)
    except karma.KarmaError as e:
        print(f"amsgrad refused: {e}")
    try:
        karma.HostOptimizer(torch.optim.RMSprop(net.parameters()), lib=lib)
        print("RMSprop was accepted")
        results.append(False)
    except karma.KarmaError as e:
        print(f"RMSprop refused: {e}")
    # bfloat16 parameters: an fp32 master copy inside KARMA; the update follows torch's fp32 one to a bf16 step.
    net16 = model().to(torch.bfloat16)
    net32 = copy.deepcopy(net16).float()  # the same starting values
    opt32, opt16 = torch.optim.SGD(net32.parameters(), lr=0.1), torch.optim.SGD(net16.parameters(), lr=0.1)
    host16 = karma.HostOptimizer(opt16, lib=lib)
    for p32, p16 in zip(net32.parameters(), net16.parameters()):
        g = torch.randn_like(p32).to(torch.bfloat16)
        p16.grad, p32.grad = g, g.float()
    opt32.step()
    host16.step()
    host16.close()
    close = all(torch.allclose(a.to(torch.bfloat16).float(), b.float(), rtol=2 ** -7, atol=0)
                for a, b in zip(net32.parameters(), net16.parameters()))
    print(f"bf16 sgd step {'within a bf16 step of fp32 torch' if close else 'FAIL'}")
    results.append(close)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
