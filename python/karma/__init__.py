"""KARMA from Python: the host optimizer for torch.optim optimizers, over libkarma_mpi.so's C API (ctypes)."""
from .capi import KarmaError, load
from .optimizer import HostOptimizer

__all__ = ["HostOptimizer", "KarmaError", "load"]
