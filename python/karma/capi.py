"""The C API of include/karma/karma.h as ctypes declarations, and finding the library that exports it."""
import ctypes
import ctypes.util
import os


class Config(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int32), ("isa", ctypes.c_int32), ("block_elems", ctypes.c_uint64)]


class HParams(ctypes.Structure):
    _fields_ = [("algorithm", ctypes.c_int32), ("nesterov", ctypes.c_int32), ("maximize", ctypes.c_int32),
                ("reserved", ctypes.c_int32), ("lr", ctypes.c_double), ("weight_decay", ctypes.c_double),
                ("momentum", ctypes.c_double), ("dampening", ctypes.c_double), ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double), ("eps", ctypes.c_double)]


class Tensor(ctypes.Structure):
    _fields_ = [("param", ctypes.c_void_p), ("grad", ctypes.c_void_p), ("numel", ctypes.c_uint64),
                ("dtype", ctypes.c_int32), ("momentum_buffer_valid", ctypes.c_int32), ("step", ctypes.c_int64),
                ("exp_avg", ctypes.c_void_p), ("exp_avg_sq", ctypes.c_void_p),
                ("momentum_buffer", ctypes.c_void_p), ("master", ctypes.c_void_p)]


class DpStats(ctypes.Structure):
    _fields_ = [("active", ctypes.c_int32), ("rank", ctypes.c_int32), ("size", ctypes.c_int32),
                ("reserved", ctypes.c_int32), ("rounds", ctypes.c_uint64), ("planned_rounds", ctypes.c_uint64),
                ("calls", ctypes.c_uint64), ("groups", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("host_updates", ctypes.c_uint64), ("prefetched_bytes", ctypes.c_uint64),
                ("alpha_s", ctypes.c_double), ("beta_s_per_byte", ctypes.c_double)]


SGD, ADAM, ADAMW = 0, 1, 2
F32, BF16 = 0, 1

_P = ctypes.c_void_p
_SIGNATURES = {
    "karma_last_error": (ctypes.c_char_p, []),
    "karma_opt_hparams_default": (None, [ctypes.c_int, ctypes.POINTER(HParams)]),
    "karma_optimizer_create": (ctypes.c_int, [ctypes.POINTER(Config), ctypes.POINTER(_P)]),
    "karma_optimizer_destroy": (None, [_P]),
    "karma_optimizer_isa": (ctypes.c_int32, [_P]),
    "karma_optimizer_threads": (ctypes.c_int32, [_P]),
    "karma_optimizer_add_group": (ctypes.c_int, [_P, ctypes.POINTER(HParams), ctypes.POINTER(ctypes.c_int32)]),
    "karma_optimizer_set_hparams": (ctypes.c_int, [_P, ctypes.c_int32, ctypes.POINTER(HParams)]),
    "karma_optimizer_add_tensor": (ctypes.c_int, [_P, ctypes.c_int32, ctypes.POINTER(Tensor),
                                                  ctypes.POINTER(ctypes.c_int32)]),
    "karma_optimizer_set_pointers": (ctypes.c_int, [_P, ctypes.c_int32, ctypes.c_int32, _P, _P]),
    "karma_optimizer_get_tensor": (ctypes.c_int, [_P, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(Tensor)]),
    "karma_optimizer_set_step": (ctypes.c_int, [_P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int64]),
    "karma_optimizer_step": (ctypes.c_int, [_P]),
    "karma_dp_attach_optimizer": (ctypes.c_int, [_P]),
    "karma_dp_detach_optimizer": (ctypes.c_int, [_P]),
    "karma_dp_get_stats": (ctypes.c_int, [ctypes.POINTER(DpStats)]),
}


class KarmaError(RuntimeError):
    pass


def declare(lib):
    """Sets the argument and result types of every function of the API the library has; returns it."""
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = restype, argtypes
    return lib


def check(lib, status):
    if status != 0:
        raise KarmaError(f"karma status {status}: {lib.karma_last_error().decode()}")


def load(path=None):
    """The library with the karma_optimizer_* functions: `path`; else $KARMA_MPI_LIB; else the one already in the
    process (libkarma_mpi.so preloaded); else build/lib/libkarma_mpi.so of the checkout this package is in, or the
    one installed beside it (cmake --install)."""
    candidates = [path, os.environ.get("KARMA_MPI_LIB")]
    for candidate in candidates:
        if candidate:
            return declare(ctypes.CDLL(candidate))
    process = ctypes.CDLL(None)
    if hasattr(process, "karma_optimizer_create"):
        return declare(process)
    here = os.path.dirname(os.path.abspath(__file__))
    # This checkout's build, or the installed tree (the package in LIBDIR/python3/dist-packages/karma).
    for built in (os.path.join(here, "..", "..", "build", "lib", "libkarma_mpi.so"),
                  os.path.join(here, "..", "..", "..", "libkarma_mpi.so")):
        if os.path.exists(built):
            return declare(ctypes.CDLL(os.path.normpath(built)))
    raise KarmaError("libkarma_mpi.so not found: pass its path, set KARMA_MPI_LIB, or preload it")
