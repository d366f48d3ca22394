#!/usr/bin/env python3
"""Holds a GPU's memory so that only a given amount stays free: a smaller GPU for the runs beside it.

A budget given to libkarma.so (KARMA_CAPACITY) on a device with plenty of memory is KARMA's own limit: the driver
never has to evict anything, and managed memory alone (KARMA_MODE=um) runs at in-core speed. With this process
holding the rest, the device is really short: plain PyTorch runs out of memory, managed memory alone pages, and
KARMA's plan must hold on a device the driver keeps full. The memory is ordinary device memory (cudaMalloc through
PyTorch's allocator, in a process without libkarma.so), which the driver never evicts.

    occupy.py --leave BYTES [--ready FILE] [--parent PID]   # holds until SIGTERM/SIGINT or PID is gone
    occupy.py --self-test                      # the sizing against a fake device, no GPU needed

BYTES: a number with an optional unit, as KARMA_CAPACITY takes it (G and GiB binary, GB decimal). Once the device's free memory (cudaMemGetInfo) is
within 2 MiB above BYTES it prints one line, writes it to --ready, and waits. Exit codes: 0 released on request,
1 it could not leave that little (more asked for than is free, or allocation failed early), 64 bad command line.
"""
import argparse
import os
import re
import signal
import sys
import threading

GRAIN = 2 << 20        # device allocations are made of 2 MiB pages
# PyTorch's caching allocator serves a request between 1 and 10 MiB from a 20 MiB segment of its own: through it,
# steps below that would take more than they ask for.
TORCH_GRAIN = 20 << 20
CHUNK = 1 << 30        # the first allocations: 1 GiB each, then smaller towards the target

# As KARMA_CAPACITY reads them: K, M, G, T and KiB... binary, KB, MB, GB, TB decimal.
UNITS = {"": 1, "b": 1}
for i, p in enumerate("kmgt", 1):
    UNITS.update({p: 1 << 10 * i, p + "ib": 1 << 10 * i, p + "b": 1000 ** i})


def parse_bytes(text):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", text, re.IGNORECASE)
    if not m or m.group(2).lower() not in UNITS:
        raise ValueError(f"not a size: {text!r} (e.g. 3GiB, 1500MB, 2147483648)")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def fill(mem_free, allocate, leave, grain=GRAIN):
    """Allocates until less than `grain` above `leave` bytes are free. `mem_free()` gives the free bytes now,
    `allocate(n)` holds n more or raises MemoryError. Returns (held bytes, free bytes at the end); raises ValueError
    when less than `leave` is free to begin with."""
    free = mem_free()
    if free < leave:
        raise ValueError(f"only {free} bytes are free, fewer than the {leave} to leave")
    held = 0
    chunk = CHUNK
    while free - leave >= grain:
        size = min(chunk, (free - leave) // GRAIN * GRAIN)
        try:
            allocate(size)
        except MemoryError:
            if size <= grain:
                break  # the driver keeps the last few pages for itself: as close as it gets
            chunk = max(grain, size // 2 // GRAIN * GRAIN)
            continue
        held += size
        free = mem_free()
    return held, free


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class Fake:
    """A device for the checks without a GPU: `free` bytes free, allocations cost `overhead` bytes more than asked,
    and the last `refuse_below` bytes are refused."""

    name = "a fake device"

    def __init__(self, free, refuse_below=0, overhead=0, total=None):
        self.free, self.refuse_below, self.overhead = free, refuse_below, overhead
        self.total = total or free

    def mem_free(self):
        return self.free

    def allocate(self, n):
        if self.free - n - self.overhead < self.refuse_below:
            raise MemoryError
        self.free -= n + self.overhead


class Gpu:
    """The device through PyTorch: ordinary device memory from its caching allocator."""

    def __init__(self, index):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no GPU usable by PyTorch")
        self.torch, self.dev = torch, torch.device("cuda", index)
        torch.cuda.init()
        self.blocks = []
        self.name = torch.cuda.get_device_name(self.dev)
        self.total = torch.cuda.mem_get_info(self.dev)[1]

    def mem_free(self):
        return self.torch.cuda.mem_get_info(self.dev)[0]

    def allocate(self, n):
        try:
            self.blocks.append(self.torch.empty(n, dtype=self.torch.uint8, device=self.dev))
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError derives from it
            if "out of memory" not in str(e).lower():
                raise
            self.torch.cuda.empty_cache()
            raise MemoryError from e


def self_test():
    gib, mib = 1 << 30, 1 << 20
    d = Fake(80 * gib)
    held, free = fill(d.mem_free, d.allocate, 3 * gib + 5 * mib)
    assert 3 * gib + 5 * mib <= free < 3 * gib + 5 * mib + GRAIN, (held, free)
    assert held == 80 * gib - free, held
    # In steps no smaller than PyTorch's segments for mid-sized requests: within 20 MiB, never below the target.
    d = Fake(80 * gib)
    held, free = fill(d.mem_free, d.allocate, 3 * gib + 5 * mib, TORCH_GRAIN)
    assert 3 * gib + 5 * mib <= free < 3 * gib + 5 * mib + TORCH_GRAIN, free
    # Each allocation costs a little more than asked (page tables), and the last 300 MiB are refused.
    d = Fake(40 * gib, refuse_below=300 * mib, overhead=64 << 10)
    held, free = fill(d.mem_free, d.allocate, 100 * mib)
    assert 300 * mib <= free < 300 * mib + GRAIN + (64 << 10), free
    d = Fake(gib)
    try:
        fill(d.mem_free, d.allocate, 2 * gib)
        raise AssertionError("leaving more than is free must fail")
    except ValueError:
        pass
    assert alive(os.getpid()) and not alive(2**22 + 1)
    assert parse_bytes("3GiB") == 3 * gib and parse_bytes("1500MB") == 1_500_000_000 and parse_bytes("2m") == 2 * mib and parse_bytes("42") == 42
    for bad in ("", "-1", "3 PB", "GiB", "1e9"):
        try:
            parse_bytes(bad)
            raise AssertionError(f"{bad!r} must be refused")
        except ValueError:
            pass
    print("occupy: self-test passed")
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--leave", help="bytes to leave free on the device")
    p.add_argument("--ready", help="write the ready line to this file once the memory is held")
    p.add_argument("--parent", type=int, help="release once this process is gone (a killed suite leaves no holder)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--self-test", action="store_true")
    try:
        a = p.parse_args(argv)
        if a.self_test:
            return self_test()
        if a.leave is None:
            p.error("--leave is required")
        leave = parse_bytes(a.leave)
    except SystemExit as e:
        return 0 if e.code == 0 else 64
    except ValueError as e:
        print(f"occupy: {e}", file=sys.stderr)
        return 64

    try:
        # OCCUPY_FAKE_FREE=BYTES: a fake device with that much free, for the suite's dry run (no GPU).
        fake = os.environ.get("OCCUPY_FAKE_FREE")
        device = Fake(parse_bytes(fake)) if fake else Gpu(a.device)
        held, free = fill(device.mem_free, device.allocate, leave, GRAIN if fake else TORCH_GRAIN)
    except (ValueError, RuntimeError, ImportError) as e:
        print(f"occupy: cannot leave {leave} bytes: {e}", file=sys.stderr)
        return 1
    line = (f"occupy: holding {held / 2**30:.2f} GiB on {device.name}; {free / 2**30:.2f} GiB of "
            f"{device.total / 2**30:.2f} GiB free (asked to leave {leave / 2**30:.2f} GiB)")
    print(line, flush=True)
    if free > leave + 2 * TORCH_GRAIN:
        print(f"occupy: the driver refused more: {free - leave} bytes above the target stay free", file=sys.stderr)
    if a.ready:
        with open(a.ready + ".tmp", "w") as f:
            f.write(line + "\n")
        os.replace(a.ready + ".tmp", a.ready)

    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())

    while not done.wait(1.0):
        if a.parent and not alive(a.parent):
            break
    print("occupy: released", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
