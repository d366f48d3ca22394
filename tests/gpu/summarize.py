#!/usr/bin/env python3
"""Turns the GPU suite's per-run JSON files into a table (stdout) and a Markdown section for docs/gpu-results.md.

    summarize.py RESULTS_DIR [--md OUT.md] [--json OUT.json] [--title TEXT]

RESULTS_DIR holds MODEL-CONFIG.json files written by train_bench.py and train_jax.py (model jax; the suite names
them), plus optional environment.json and record_smoke.txt from run_gpu_suite.sh. Per model, the `plain` run is
the reference: the other configurations are compared with it for time (x plain) and for loss agreement over every
iteration ("bit-identical" when every loss is exactly the same, else the largest relative difference).
"""
import argparse
import glob
import json
import os
import sys

CONFIG_ORDER = ["plain", "plain-again", "karma-async", "karma-copy", "karma", "karma-app-thread", "karma-unbatched", "um",
                "checkpoint", "plain-full", "karma-copy-full"]
CONFIG_TEXT = {
    "plain": "PyTorch, enough memory",
    "plain-again": "PyTorch again (run-to-run agreement)",
    "karma": "libkarma.so, caching allocator",
    "karma-app-thread": "libkarma.so, caching allocator, KARMA_MOVE_THREADS=0 (moves from the application's thread)",
    "karma-unbatched": "libkarma.so, caching allocator, KARMA_BATCH_MOVES=0",
    "karma-async": "libkarma.so, cudaMallocAsync, managed memory (its defaults)",
    "um": "KARMA_MODE=um (managed memory only)",
    "checkpoint": "torch.utils.checkpoint",
    # Beside tests/gpu/occupy.py, which leaves the device only the budget (and what the process needs outside it).
    "plain-full": "PyTorch, device short of memory",
    "karma-copy": "libkarma.so, cudaMallocAsync, KARMA_RESIDENCY=copy (VMM pool, copy engines)",
    "karma-copy-full": "libkarma.so, cudaMallocAsync, KARMA_RESIDENCY=copy, device short of memory",
}
# The JAX model's rows where they differ: XLA's allocators instead of PyTorch's (libkarma.so sets
# XLA_PYTHON_CLIENT_ALLOCATOR=platform and XLA_PYTHON_CLIENT_PREALLOCATE=false unless KARMA_ALLOCATORS=keep).
JAX_CONFIG_TEXT = {
    "plain": "JAX, enough memory",
    "plain-again": "JAX again (run-to-run agreement)",
    "karma": "libkarma.so, XLA's BFC allocator",
    "karma-async": "libkarma.so, XLA's platform allocator, managed memory (its defaults)",
    "checkpoint": "jax.checkpoint",
    "plain-full": "JAX, device short of memory",
    "karma-copy": "libkarma.so, XLA's platform allocator, KARMA_RESIDENCY=copy",
    "karma-copy-full": "libkarma.so, XLA's platform allocator, KARMA_RESIDENCY=copy, device short of memory",
}
# Runs that are meant to run out of memory: plain PyTorch (or JAX) on the device made short of it.
EXPECTED_OOM = {"plain-full"}


def gib(b):
    # PyTorch keeps no allocator statistics with backend:cudaMallocAsync: it reports 0.
    return f"{b / 2**30:.2f} GiB" if isinstance(b, (int, float)) and b > 0 else "-"


def agreement(ref, run):
    a, b = ref.get("losses") or [], run.get("losses") or []
    if not a or not b:
        return "-"
    if len(a) != len(b):
        return f"{len(b)} vs {len(a)} iterations"
    if a == b:
        return "bit-identical"
    worst = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
    return f"max rel. diff {worst:.2e}"


def karma_summary(directory, model, config):
    """libkarma.so's exit summary line from the run's log, if it printed one (with the device residency in steady
    replay against the budget), its line of managed-memory calls by kind, its line of the link rates the plan's moves
    found, the line saying it started from the rates an earlier run recorded, what the recording cost in wall clock
    and which allocations it saw no use of, and the last plan's lines: what it was planned for (with the in-core
    peak) and what its replay moves (all KARMA_LOG=info)."""
    try:
        with open(os.path.join(directory, f"{model}-{config}.log")) as f:
            lines = [line.strip() for line in f]
    except OSError:
        return ""
    summary = [line for line in lines if line.startswith("karma: mode")]
    extra = []
    for start in ("karma: managed-memory calls per replayed iteration", "karma: the plan's moves ran at",
                  "karma: planning with the host link an earlier run measured", "karma: recording took",
                  "karma: recorded iteration", "the application held (", "karma: planned on",
                  "karma: replaying the plan from"):
        found = [line for line in lines if line.startswith(start) or (start[0] != "k" and start in line)]
        if found:
            extra.append(found[-1][len("karma: "):])
    if not summary:
        return ""
    return " -- ".join([summary[-1]] + extra)


def plan_state(config, summary):
    """Whether a KARMA_MODE=auto run replayed a plan, from its exit summary: without one, its row measures managed
    memory with the budget unenforced, not KARMA."""
    if not config.startswith("karma"):
        return "-"
    if not summary:
        return "?"
    return "none" if "no plan replayed" in summary or "no iteration recorded" in summary else "replayed"


def load(directory):
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        name = os.path.basename(path)[:-5]
        if "-" not in name or name in ("environment", "results"):
            continue
        model, config = name.split("-", 1)
        try:
            with open(path) as f:
                runs.setdefault(model, {})[config] = json.load(f)
        except (OSError, ValueError) as e:
            runs.setdefault(model, {})[config] = {"status": "error", "message": f"unreadable result: {e}"}
        runs[model][config]["karma_summary"] = karma_summary(directory, model, config)
        try:
            with open(os.path.join(directory, f"{model}-{config}.occupy")) as f:
                runs[model][config]["occupy"] = f.read().strip()
        except OSError:
            pass
    return runs


def late_mean(run):
    """Mean of the later half of the timed iterations: a KARMA run's recording, profiling iteration and recompute
    checks may fall in the first timed ones when the warm-up is short."""
    times = run.get("times_ms") or []
    late = times[len(times) // 2:]
    return sum(late) / len(late) if late else None


def rows(runs):
    out = []
    for model in sorted(runs):
        configs = runs[model]
        ref = configs.get("plain", {})
        ref_ms = ref.get("ms_mean") if ref.get("status") == "ok" else None
        ref_late = late_mean(ref) if ref.get("status") == "ok" else None
        order = [c for c in CONFIG_ORDER if c in configs] + sorted(c for c in configs if c not in CONFIG_ORDER)
        for config in order:
            r = configs[config]
            ok = r.get("status") == "ok"
            ms = r.get("ms_mean") if ok else None
            late = late_mean(r) if ok else None
            out.append({
                "model": model,
                "config": config,
                "what": (JAX_CONFIG_TEXT.get(config) if model == "jax" else None) or CONFIG_TEXT.get(config, config),
                "status": r.get("status", "?") + (f" ({r['message']})" if not ok and r.get("message") else ""),
                "ms": f"{ms:.1f}" if ms is not None else "-",
                "x_plain": f"{ms / ref_ms:.2f}" if ms is not None and ref_ms else "-",
                "ms_late": f"{late:.1f}" if late is not None else "-",
                "x_late": f"{late / ref_late:.2f}" if late is not None and ref_late else "-",
                "peak_alloc": gib(r.get("peak_allocated_bytes")),
                "peak_reserved": gib(r.get("peak_reserved_bytes")),
                "capacity": r.get("env", {}).get("KARMA_CAPACITY") or "-",
                "loss": agreement(ref, r) if ok and config != "plain" and ref.get("status") == "ok" else (
                    "reference" if ok and config == "plain" else "-"),
                "final_loss": f"{r['losses'][-1]:.6g}" if ok and r.get("losses") else "-",
                "shape": r.get("shape", ""),
                "karma_summary": r.get("karma_summary", ""),
                "backend": r.get("allocator_backend", ""),
                "plan": plan_state(config, r.get("karma_summary", "")) if ok else "-",
                "occupy": r.get("occupy", ""),
                "expected": ok or (config in EXPECTED_OOM and r.get("status") == "oom") or
                r.get("status", "").startswith("skipped"),
            })
    return out


COLUMNS = [("model", "model"), ("configuration", "what"), ("status", "status"), ("ms/iter", "ms"),
           ("x plain", "x_plain"), ("later half", "ms_late"), ("x plain", "x_late"), ("peak allocated", "peak_alloc"), ("peak reserved", "peak_reserved"),
           ("KARMA_CAPACITY", "capacity"), ("plan", "plan"), ("loss vs plain", "loss"), ("final loss", "final_loss")]


def text_table(table):
    widths = [max(len(h), *(len(r[k]) for r in table)) if table else len(h) for h, k in COLUMNS]
    lines = ["  ".join(h.ljust(w) for (h, _), w in zip(COLUMNS, widths))]
    for r in table:
        lines.append("  ".join(r[k].ljust(w) for (_, k), w in zip(COLUMNS, widths)))
    return "\n".join(lines)


def markdown(table, env, smoke, title):
    md = [f"## {title}", ""]
    for key in ("date", "gpu", "driver", "cuda", "torch", "jax", "karma_commit", "pressure", "iters", "warmup"):
        if env.get(key) and env[key] != "none":
            md.append(f"- {key.replace('_', ' ')}: {env[key]}")
    if env.get("command"):
        md.append(f"- command: `{env['command']}`")
    shapes = sorted({(r["model"], r["shape"]) for r in table if r["shape"]})
    for model, shape in shapes:
        md.append(f"- {model}: {shape}")
    if smoke:
        md.append(f"- record_smoke (tests/gpu/run_record_smoke.sh): {smoke}")
    md += ["", "| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in table:
        md.append("| " + " | ".join(r[k].replace("|", "/") for _, k in COLUMNS) + " |")
    held = [(r["model"], r["config"], r["occupy"]) for r in table if r.get("occupy")]
    if held:
        md += ["", "The device made short of memory (tests/gpu/occupy.py, in another process):", ""]
        md += [f"- {model} {config}: {line}" for model, config, line in held]
    # Which allocator PyTorch ran, and which XLA was set to (libkarma.so sets cudaMallocAsync, and XLA's platform
    # allocator without preallocation, unless KARMA_ALLOCATORS=keep).
    backends = [(r["model"], r["config"], r["backend"]) for r in table if r.get("backend")]
    for heading, of_jax in (("PyTorch's allocator backend (torch.cuda.get_allocator_backend()):", False),
                            ("XLA's allocator (XLA_PYTHON_CLIENT_ALLOCATOR and _PREALLOCATE as the JAX run saw them):",
                             True)):
        listed = [(m, c, b) for m, c, b in backends if (m == "jax") == of_jax]
        if listed:
            md += ["", heading, ""]
            md += [f"- {model} {config}: {backend}" for model, config, backend in listed]
    summaries = [(r["model"], r["config"], r["karma_summary"]) for r in table if r.get("karma_summary")]
    if summaries:
        md += ["", "libkarma.so's exit summaries:", ""]
        md += [f"- {model} {config}: `{line}`" for model, config, line in summaries]
    jax = any(r["model"] == "jax" for r in table)
    md += ["", "Times: mean of the timed iterations (CUDA events, warm-up excluded"
           + ("; JAX: wall clock to block_until_ready" if jax else "") + "), and of their later half (a "
           "KARMA run's recording, profiling iteration and recompute checks may fall in the first ones). Peak: torch.cuda's "
           "allocator statistics (what PyTorch asked for, wherever it lives)"
           + ("; JAX: memory_stats() of XLA's BFC allocator (reserved: its pool), none with the platform allocator"
              if jax else "") + ". Plan: whether libkarma.so replayed a "
           "plan (none: the row is managed memory with the budget unenforced). Loss: every iteration's loss "
           "compared with the plain run. Rows \"device short of memory\" ran beside tests/gpu/occupy.py holding all "
           "but the budget and what the process needs outside the framework's allocator; the plain run is expected "
           "to run out of memory there.", ""]
    return "\n".join(md)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--md", help="write the Markdown section here")
    p.add_argument("--json", help="write every run and the table here")
    p.add_argument("--title", default="GPU suite results")
    a = p.parse_args(argv)
    runs = load(a.dir)
    if not runs:
        print(f"summarize: no MODEL-CONFIG.json results in {a.dir}", file=sys.stderr)
        return 1
    env = {}
    env_path = os.path.join(a.dir, "environment.json")
    if os.path.exists(env_path):
        with open(env_path) as f:
            env = json.load(f)
    smoke = ""
    smoke_path = os.path.join(a.dir, "record_smoke.txt")
    if os.path.exists(smoke_path):
        with open(smoke_path) as f:
            smoke = f.read().strip()
    table = rows(runs)
    print(text_table(table))
    if a.md:
        with open(a.md, "w") as f:
            f.write(markdown(table, env, smoke, a.title))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"environment": env, "record_smoke": smoke, "table": table, "runs": runs}, f, indent=1)
    return 0 if all(r["expected"] for r in table) else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
