#!/usr/bin/env python3
"""The report of tools/bench/replica_run.sh: from the runs' samples (pipeline_bench.py follow
JSON), tokens/s of the replicated job against the single pipeline, the losses at equal tokens,
and what killing a site cost. Markdown on stdout.

Tokens are counted per step from the replicas that trained it: a replica dropped mid-job
(sync.on_site_loss: drop, local mode) contributes nothing to the steps it sat out, so those
steps count only the live replicas' tokens (in sync mode step the dropped replicas'
microbatches go to the live ones, so such a step still trains every replica's share). Which
replicas were counted at which steps is printed under the table. `--self-test` checks the
counting on made-up samples."""
import argparse
import json
import os
import re
import sys


def load(out, kind):
    path = os.path.join(out, f"{kind}.json")
    return json.load(open(path)) if os.path.exists(path) else None


def dropped_at_steps(samples):
    """{step: the replicas that sat it out} for every step of the run's final trajectory.

    Samples are polls of the job's status in time order, each with `step` (steps completed)
    and `dropped_replicas`. The steps completed between two polls are attributed to both
    polls' dropped sets together: a replica counts at a step only if neither poll around it
    showed it dropped (at worst a poll interval of its steps around a drop or a rejoin is not
    counted; never one it sat out). A rollback (the step going back, as a drop or a rejoin
    restarts from the committed step) makes the later polls overwrite the steps trained
    again."""
    out = {}
    prev = None
    for s in samples:
        now = {int(r) for r in s.get("dropped_replicas") or []}
        before = now if prev is None else {int(r) for r in prev.get("dropped_replicas") or []}
        lo = 0 if prev is None else int(prev["step"])
        for k in range(lo + 1, int(s["step"]) + 1):
            out[k] = now | before
        prev = s
    return out


def live_tokens(dropped, per_replica, first, last, step_mode=False):
    """Tokens of steps first+1..last: at each, the sum of per_replica[r] over the replicas r
    not in dropped[step] (all of them in step mode, or with none live)."""
    total = 0
    for k in range(first + 1, last + 1):
        out = dropped.get(k, set())
        live = [t for r, t in enumerate(per_replica) if r not in out]
        total += sum(per_replica) if step_mode or not live else sum(live)
    return total


def counted_ranges(dropped, replicas, last):
    """Which replicas were counted at which steps: [(first, last, [replicas])] in step order."""
    ranges = []
    for k in range(1, last + 1):
        live = [r for r in range(replicas) if r not in dropped.get(k, set())]
        if ranges and ranges[-1][2] == live and ranges[-1][1] == k - 1:
            ranges[-1] = (ranges[-1][0], k, live)
        else:
            ranges.append((k, k, live))
    return ranges


def throughput(run, tokens_between, skip=2):
    """Tokens/s from the time the job reached step `skip` (past start-up) to its last step;
    tokens_between(a, b) gives the tokens of steps a+1..b."""
    samples = run["samples"]
    final_step = int(run["final"].get("step", 0))
    start = next((s for s in samples if s["step"] >= skip), None)
    end = next((s for s in samples if s["step"] >= final_step), None)
    if start is None or end is None or end["t"] <= start["t"]:
        return None, None
    seconds = end["t"] - start["t"]
    return tokens_between(int(start["step"]), int(end["step"])) / seconds, seconds


def replica_tokens(run, batch, microbatch, seq, replicas):
    """Tokens each replica trains per step: its stages' recorded microbatches (the job's
    replica_microbatches or the planner's pacing) x microbatch x seq where the final status
    has them and --microbatch is given, else batch x seq each."""
    per = [batch * seq] * replicas
    if microbatch:
        for st in run["final"].get("stages", []):
            r, m = int(st.get("replica", 0)), int(st.get("microbatches", 0) or 0)
            if m > 0 and r < replicas:
                per[r] = m * microbatch * seq
    return per


def sync_mode_step(run, kind):
    """Whether the run's job is in sync mode step (its job file, else the run's name)."""
    try:
        text = open(run["job"]).read()
        return re.search(r"sync:\s*\{[^}]*\bmode:\s*step\b", text) is not None
    except (KeyError, OSError, TypeError):
        return kind == "step"


def fmt_ranges(ranges):
    return "; ".join(f"steps {a}-{b}: replica{'s' if len(live) != 1 else ''} "
                     f"{', '.join(map(str, live)) or 'none'}" for a, b, live in ranges)


def self_test():
    # Two replicas of 1024 tokens; replica 1 dropped at a rollback to step 95 (trained again
    # from 96 without it), rejoining at a rollback to step 100; polls every few steps.
    polls = [(0, []), (40, []), (90, []), (97, []), (95, [1]), (96, [1]), (99, [1]),
             (102, [1]), (100, []), (101, []), (150, [])]
    samples = [{"step": s, "dropped_replicas": d} for s, d in polls]
    dropped = dropped_at_steps(samples)
    assert all(dropped[k] == set() for k in range(1, 96)), dropped
    assert all(dropped[k] == {1} for k in range(96, 101)), dropped
    assert all(dropped[k] == set() for k in range(101, 151)), dropped
    assert live_tokens(dropped, [1024, 1024], 0, 150) == 150 * 2048 - 5 * 1024
    assert live_tokens(dropped, [1024, 1024], 0, 150, step_mode=True) == 150 * 2048
    assert live_tokens(dropped, [1024, 512], 95, 100) == 5 * 1024
    assert counted_ranges(dropped, 2, 150) == [(1, 95, [0, 1]), (96, 100, [0]), (101, 150, [0, 1])]
    # A drop seen between two polls without a rollback: the steps between them are not
    # counted for the dropped replica (never counted when it may have sat out).
    dropped = dropped_at_steps([{"step": 10, "dropped_replicas": []},
                                {"step": 12, "dropped_replicas": [0]},
                                {"step": 14, "dropped_replicas": [0]}])
    assert [sorted(dropped[k]) for k in range(9, 15)] == [[], [], [0], [0], [0], [0]], dropped
    assert live_tokens(dropped, [100, 100], 0, 14) == 10 * 200 + 4 * 100
    print("replica_run.py self-test passed")


def tail_mean(losses, k):
    tail = losses[-k:]
    return sum(tail) / len(tail) if tail else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--window", type=int, default=5, help="replicated steps the final loss averages")
    p.add_argument("--union", type=int, default=0,
                   help="1: the single pipeline trained the union batch (2 x --batch per step)")
    p.add_argument("--microbatch", type=int, default=0,
                   help="sequences per microbatch: with it, each replica's tokens per step come "
                        "from its stages' recorded microbatches (0: --batch x --seq each)")
    p.add_argument("--replicas", type=int, default=2, help="replicas of the replicated runs")
    p.add_argument("--runs", nargs="+", default=["single", "replicas", "kill", "step"])
    p.add_argument("--self-test", action="store_true", help="check the token counting and exit")
    if "--self-test" in sys.argv[1:]:
        self_test()
        return
    a = p.parse_args()
    runs = {k: load(a.out, k) for k in a.runs}
    rows, counted = [], []
    for kind, run in runs.items():
        if run is None:
            continue
        f = run["final"]
        steps = int(f.get("step", 0))
        if kind == "single":
            # One pipeline: one batch a step, or the replicas' union batch (--union).
            per = [(a.replicas if a.union else 1) * a.batch * a.seq]
        else:
            per = replica_tokens(run, a.batch, a.microbatch, a.seq, a.replicas)
        step_mode = sync_mode_step(run, kind)
        dropped = dropped_at_steps(run["samples"])
        def between(x, y, per=per, dropped=dropped, step_mode=step_mode):
            return live_tokens(dropped, per, x, y, step_mode)
        tps, seconds = throughput(run, between)
        if len(per) > 1:
            how = ("sync mode step: every replica's share trained at every step (a dropped "
                   "replica's microbatches go to the live ones)" if step_mode else
                   fmt_ranges(counted_ranges(dropped, len(per), steps)))
            counted.append(f"- {kind}: tokens per replica per step {', '.join(map(str, per))}; "
                           f"counted {how}")
        losses = [float(x) for x in f.get("losses", [])]
        # Without --union the single pipeline takes two steps for each replicated step's tokens.
        window = a.window * (2 if kind == "single" and not a.union else 1)
        rows.append({"kind": kind, "state": f.get("state"), "steps": steps,
                     "attempt": int(f.get("attempt", 0)), "tokens_per_second": tps,
                     "seconds": seconds, "wall": run["samples"][-1]["t"] if run["samples"] else 0,
                     "tokens": between(0, steps),
                     "final_loss": tail_mean(losses, window), "losses": losses})
    by = {r["kind"]: r for r in rows}
    print("| run | state | steps | tokens | attempts | wall s | tokens/s (from step 2) | "
          "final loss (same tokens) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        tps = f"{r['tokens_per_second']:.0f}" if r["tokens_per_second"] else "-"
        print(f"| {r['kind']} | {r['state'].replace('JOB_STATE_', '').lower()} | {r['steps']} | "
              f"{r['tokens']} | {r['attempt']} | {r['wall']:.1f} | {tps} | "
              f"{r['final_loss']:.4f} |")
    print()
    if counted:
        print("Tokens (the table's and tokens/s) count, at each step, only the replicas that "
              "trained it:")
        print("\n".join(counted))
        print()
    single, rep, kill = by.get("single"), by.get("replicas"), by.get("kill")
    if single and rep and single["tokens_per_second"] and rep["tokens_per_second"]:
        print(f"- tokens/s, 2 replicas over 1 pipeline: "
              f"**{rep['tokens_per_second'] / single['tokens_per_second']:.2f}x** "
              f"(target 1.7x)")
        print(f"- final loss at equal tokens ({rep['tokens']}), replicas against the single "
              f"pipeline: {rep['final_loss']:.4f} vs {single['final_loss']:.4f}, "
              f"**{100 * (rep['final_loss'] / single['final_loss'] - 1):+.2f}%** (target within 2%)")
    step = by.get("step")
    if rep and step:
        print(f"- final loss against sync mode step / exact (the same steps and tokens, the union "
              f"batch): {rep['final_loss']:.4f} vs {step['final_loss']:.4f}, "
              f"**{100 * (rep['final_loss'] / step['final_loss'] - 1):+.2f}%**; step mode's "
              f"tokens/s {step['tokens_per_second']:.0f}")
    if rep and kill:
        same = kill["losses"] == rep["losses"]
        diff = max((abs(x - y) for x, y in zip(kill["losses"], rep["losses"])), default=0.0)
        kill_step = open(os.path.join(a.out, "kill-step.txt")).read().strip() \
            if os.path.exists(os.path.join(a.out, "kill-step.txt")) else "?"
        f = runs["kill"]["final"]
        print(f"- kill -9 of a site at step {kill_step}: the job ended "
              f"{kill['state'].replace('JOB_STATE_', '').lower()} after {kill['attempt']} "
              f"attempts, {kill['wall'] - rep['wall']:+.1f} s against the run without the kill; "
              f"losses {'identical bit for bit' if same else f'differ by up to {diff:.3g}'} "
              f"to the run without the kill; final loss {kill['final_loss']:.4f} "
              f"({100 * (kill['final_loss'] / rep['final_loss'] - 1):+.2f}% against it)")
        # sync.on_site_loss: drop: the steps the samples saw a replica sitting out.
        out_steps = [s["step"] for s in runs["kill"]["samples"] if s.get("dropped_replicas")]
        if out_steps or int(f.get("replica_drops", 0)):
            print(f"- replica drops {int(f.get('replica_drops', 0))}, rejoins "
                  f"{int(f.get('replica_rejoins', 0))}; a replica sat out from about step "
                  f"{min(out_steps, default=0)} to step {max(out_steps, default=0)} (its tokens "
                  f"of those steps not trained, nor counted: {kill['tokens']} tokens against "
                  f"{rep['tokens']} without the kill), the other trained on; last detail: "
                  f"{f.get('detail', '')}")
    if any(r["state"] != "JOB_STATE_COMPLETED" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
