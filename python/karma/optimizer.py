"""A torch.optim optimizer whose updates run on KARMA's host optimizer (host threads, AVX2/AVX-512)."""
import ctypes

from .capi import ADAM, ADAMW, BF16, F32, SGD, Config, HParams, KarmaError, Tensor, check, declare, load


def _algorithm(optimizer):
    import torch

    # AdamW first: it is not a subclass of Adam in torch 1.13, but may be elsewhere.
    for cls, algorithm in ((torch.optim.AdamW, ADAMW), (torch.optim.Adam, ADAM), (torch.optim.SGD, SGD)):
        if isinstance(optimizer, cls):
            return algorithm
    raise KarmaError(f"{type(optimizer).__name__} is not supported (SGD, Adam and AdamW are)")


class HostOptimizer:
    """Registers a torch.optim SGD, Adam or AdamW with KARMA's host optimizer and runs its updates there.

    The parameters must be contiguous float32 or bfloat16 tensors in host memory (CPU tensors; CUDA tensors only
    where their memory is host-accessible, as KARMA's managed memory is). The optimizer's own state tensors are
    used in place for float32 parameters, so optimizer.state_dict() stays valid; bfloat16 parameters get an fp32
    master copy and fp32 state owned by KARMA. Hyper-parameters are read from optimizer.param_groups at every
    step (learning-rate schedulers work as with torch).

        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        host = karma.HostOptimizer(opt)
        ...
        loss.backward()
        host.step()            # instead of opt.step()

    With libkarma_mpi.so running an MPI program, attach_data_parallel() lets the shim update each tensor as soon
    as its gradient's allreduce completes; the gradients must then be allocated before the allreduces are issued
    (zero_grad(set_to_none=False)) and refresh() called whenever they change.
    """

    def __init__(self, optimizer, lib=None, threads=0):
        import torch

        self.optimizer = optimizer
        self.lib = declare(lib) if isinstance(lib, ctypes.CDLL) else load(lib)
        self._algorithm = _algorithm(optimizer)
        self._torch = torch
        self._handle = ctypes.c_void_p()
        check(self.lib, self.lib.karma_optimizer_create(ctypes.byref(Config(threads, 0, 0)),
                                                         ctypes.byref(self._handle)))
        self._entries = []  # (group id, tensor index, parameter, momentum buffer we allocated or None)
        try:
            for group in optimizer.param_groups:
                if group.get("amsgrad", False):
                    raise KarmaError("amsgrad is not supported")
                gid = ctypes.c_int32()
                check(self.lib, self.lib.karma_optimizer_add_group(self._handle, ctypes.byref(self._hparams(group)),
                                                                   ctypes.byref(gid)))
                for p in group["params"]:
                    self._add(gid.value, group, p)
        except Exception:
            self.close()
            raise

    def _hparams(self, group):
        hp = HParams()
        self.lib.karma_opt_hparams_default(self._algorithm, ctypes.byref(hp))
        hp.lr = float(group["lr"])
        hp.weight_decay = float(group.get("weight_decay", 0.0))
        hp.maximize = int(bool(group.get("maximize", False)))
        if self._algorithm == SGD:
            hp.momentum = float(group.get("momentum", 0.0))
            hp.dampening = float(group.get("dampening", 0.0))
            hp.nesterov = int(bool(group.get("nesterov", False)))
        else:
            hp.beta1, hp.beta2 = (float(b) for b in group["betas"])
            hp.eps = float(group["eps"])
        return hp

    def _add(self, gid, group, p):
        torch = self._torch
        if p.dtype not in (torch.float32, torch.bfloat16) or not p.is_contiguous():
            raise KarmaError(f"parameters must be contiguous float32 or bfloat16, not {p.dtype}")
        if p.grad is not None and (p.grad.dtype != p.dtype or not p.grad.is_contiguous()):
            raise KarmaError("a gradient must be contiguous and of its parameter's dtype")
        state = self.optimizer.state[p]
        t = Tensor()
        t.param = p.data_ptr()
        t.grad = p.grad.data_ptr() if p.grad is not None else None
        t.numel = p.numel()
        t.dtype = F32 if p.dtype == torch.float32 else BF16
        buffer = None
        if self._algorithm == SGD:
            t.step = 0
            if p.dtype == torch.float32 and float(group.get("momentum", 0.0)) != 0:
                # torch creates the buffer at the first step as a copy of the gradient; until ours has done that,
                # torch's state must not show a buffer.
                existing = state.get("momentum_buffer")
                buffer = existing if existing is not None else torch.zeros_like(p)
                t.momentum_buffer = buffer.data_ptr()
                t.momentum_buffer_valid = int(existing is not None)
        else:
            t.step = int(float(state["step"])) if "step" in state else 0
            if p.dtype == torch.float32:
                # torch's lazy initialization, done now: zeros and step 0.
                state.setdefault("step", torch.tensor(0.0))
                state.setdefault("exp_avg", torch.zeros_like(p, memory_format=torch.preserve_format))
                state.setdefault("exp_avg_sq", torch.zeros_like(p, memory_format=torch.preserve_format))
                t.exp_avg = state["exp_avg"].data_ptr()
                t.exp_avg_sq = state["exp_avg_sq"].data_ptr()
        index = ctypes.c_int32()
        check(self.lib, self.lib.karma_optimizer_add_tensor(self._handle, gid, ctypes.byref(t), ctypes.byref(index)))
        self._entries.append((gid, index.value, p, buffer))

    def refresh(self):
        """Hands the current gradient (and parameter) arrays and hyper-parameters to KARMA."""
        for group_index, group in enumerate(self.optimizer.param_groups):
            check(self.lib, self.lib.karma_optimizer_set_hparams(self._handle, group_index,
                                                                 ctypes.byref(self._hparams(group))))
        for gid, index, p, _ in self._entries:
            grad = p.grad.data_ptr() if p.grad is not None else None
            check(self.lib, self.lib.karma_optimizer_set_pointers(self._handle, gid, index, p.data_ptr(), grad))

    def step(self):
        """One update of every parameter that has a gradient (torch.optim's step())."""
        self.refresh()
        check(self.lib, self.lib.karma_optimizer_step(self._handle))
        self.sync_state()

    def sync_state(self):
        """Copies KARMA's step counts (and the momentum buffers it started) into the torch optimizer's state."""
        torch = self._torch
        for gid, index, p, buffer in self._entries:
            t = Tensor()
            check(self.lib, self.lib.karma_optimizer_get_tensor(self._handle, gid, index, ctypes.byref(t)))
            state = self.optimizer.state[p]
            if self._algorithm != SGD and p.dtype == torch.float32:
                state["step"] = torch.tensor(float(t.step))
            if buffer is not None and t.momentum_buffer_valid:
                state["momentum_buffer"] = buffer

    def attach_data_parallel(self):
        """Lets libkarma_mpi.so update each tensor as soon as the allreduce of its gradient completes."""
        self.refresh()
        check(self.lib, self.lib.karma_dp_attach_optimizer(self._handle))

    def detach_data_parallel(self):
        check(self.lib, self.lib.karma_dp_detach_optimizer(self._handle))

    def close(self):
        if self._handle:
            if hasattr(self.lib, "karma_dp_detach_optimizer"):
                self.lib.karma_dp_detach_optimizer(self._handle)
            self.lib.karma_optimizer_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
