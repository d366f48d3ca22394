#!/usr/bin/env python3
"""Phasing, from the timelines of a data-parallel run: the shim's (KARMA_MPI_TIMELINE, per rank) against the
application's own record of its backward passes (--timeline), both in CLOCK_MONOTONIC seconds.

  check_phasing.py DIR RANKS MODE [host]    MODE: "measured" (cost model from start-up) or the forced KARMA_MPI_COST;
                                            host: the run updates on the host (every group must have updates)

Checks, on every rank and every iteration: the allreduce of the last layers (the first group of the round,
holding the first call) starts before that iteration's backward pass ends; with host updates (--host-optimizer),
that group's three stages (its data on the host, reduced, its parameters updated on the host) all end before
the backward pass does. Once a merge plan is in use: the
rounds follow it, and with a forced start-up cost calls are merged (groups < calls). How many groups the rule
makes depends on the gaps between the calls' arrivals in host time: when the layers' gradients come faster than
the forced start-up cost (a quiet machine, a fast backward pass), merging them all into one group is the rule's
answer, and one group has nothing to overlap, so the overlap check applies to rounds of more than one group.
Prints a table of the overlap.
"""
import json
import sys


def main():
    directory, ranks, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    host = sys.argv[4:] == ["host"]
    ok = True
    for rank in range(ranks):
        shim = json.load(open(f"{directory}/shim-{rank}.json"))
        app = json.load(open(f"{directory}/app-{rank}.json"))
        calls_per_round = {}
        for c in shim["calls"]:
            calls_per_round[c["round"]] = calls_per_round.get(c["round"], 0) + 1
        # The gradient rounds (the loss's allreduce is a round of one call), in order: one per iteration.
        rounds = sorted(r for r, n in calls_per_round.items() if n > 1)
        iterations = app["iterations"]
        if len(rounds) != len(iterations):
            print(f"rank {rank}: {len(rounds)} gradient rounds for {len(iterations)} iterations")
            return 1
        planned_rounds = 0
        print(f"rank {rank} ({mode}): alpha {shim['cost']['alpha_s'] * 1e6:.1f} us; times in ms from the start "
              f"of the backward pass")
        print("  iter  calls  groups  planned  backward ends  first group starts  on host  reduced  updated  "
              "first group done  last done")
        for it, r in zip(iterations, rounds):
            groups = sorted((g for g in shim["groups"] if g["round"] == r), key=lambda g: g["first"])
            t0 = it["backward_begin"]
            first, last = groups[0], groups[-1]
            planned = all(g["planned"] for g in groups)
            if host and not all(g["updated"] for g in groups):
                print(f"  rank {rank} iteration {it['iter']}: a group of the round had no host update")
                ok = False
            planned_rounds += planned
            print(f"  {it['iter']:4d}  {calls_per_round[r]:5d}  {len(groups):6d}  {str(planned):>7}  "
                  f"{(it['backward_end'] - t0) * 1e3:13.1f}  {(first['start'] - t0) * 1e3:17.1f}  "
                  f"{(first['moved'] - t0) * 1e3:7.1f}  {(first['reduced'] - t0) * 1e3:7.1f}  "
                  f"{(first['updated'] - t0) * 1e3 if first['updated'] else float('nan'):7.1f}  "
                  f"{(first['done'] - t0) * 1e3:16.1f}  {(last['done'] - t0) * 1e3:9.1f}")
            if first["first"] != 0:
                print(f"  rank {rank} iteration {it['iter']}: the first group does not hold the first call")
                ok = False
            if len(groups) > 1 and not first["start"] < it["backward_end"]:
                print(f"  rank {rank} iteration {it['iter']}: the last layers' allreduce started after the backward "
                      f"pass ended")
                ok = False
            if len(groups) > 1 and first["updated"] and not (
                    first["start"] <= first["moved"] <= first["reduced"] <= first["updated"] < it["backward_end"]):
                print(f"  rank {rank} iteration {it['iter']}: the last layers' stages (on the host, reduced, updated) "
                      f"did not all end before the backward pass did")
                ok = False
            if planned and mode != "measured" and not len(groups) < calls_per_round[r]:
                print(f"  rank {rank} iteration {it['iter']}: {len(groups)} groups for {calls_per_round[r]} calls: "
                      f"nothing merged")
                ok = False
        if planned_rounds == 0:
            print(f"  rank {rank}: no round followed a merge plan")
            ok = False
        if not any(p["calls"] == calls_per_round[rounds[0]] for p in shim["plans"]):
            print(f"  rank {rank}: no plan for the gradient rounds")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
