#!/usr/bin/env python3
"""The report of tools/bench/replica_run.sh: from the runs' samples (pipeline_bench.py follow
JSON), tokens/s of the replicated job against the single pipeline, the losses at equal tokens,
and what killing a site cost. Markdown on stdout."""
import argparse
import json
import os
import sys


def load(out, kind):
    path = os.path.join(out, f"{kind}.json")
    return json.load(open(path)) if os.path.exists(path) else None


def throughput(run, tokens_per_step, skip=2):
    """Tokens/s from the time the job reached step `skip` (past start-up) to its last step."""
    samples = run["samples"]
    final_step = int(run["final"].get("step", 0))
    start = next((s for s in samples if s["step"] >= skip), None)
    end = next((s for s in samples if s["step"] >= final_step), None)
    if start is None or end is None or end["t"] <= start["t"]:
        return None, None
    seconds = end["t"] - start["t"]
    return (end["step"] - start["step"]) * tokens_per_step / seconds, seconds


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
    p.add_argument("--runs", nargs="+", default=["single", "replicas", "kill", "step"])
    a = p.parse_args()
    per_replica = a.batch * a.seq
    runs = {k: load(a.out, k) for k in a.runs}
    rows = []
    for kind, run in runs.items():
        if run is None:
            continue
        f = run["final"]
        # The replicas' two batches a step; the single pipeline's one, or both (--union).
        per_step = (2 if kind != "single" or a.union else 1) * per_replica
        tps, seconds = throughput(run, per_step)
        losses = [float(x) for x in f.get("losses", [])]
        # Without --union the single pipeline takes two steps for each replicated step's tokens.
        window = a.window * (2 if kind == "single" and not a.union else 1)
        rows.append({"kind": kind, "state": f.get("state"), "steps": int(f.get("step", 0)),
                     "attempt": int(f.get("attempt", 0)), "tokens_per_second": tps,
                     "seconds": seconds, "wall": run["samples"][-1]["t"] if run["samples"] else 0,
                     "tokens": int(f.get("step", 0)) * per_step,
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
                  f"of those steps not trained), the other trained on; last detail: "
                  f"{f.get('detail', '')}")
    if any(r["state"] != "JOB_STATE_COMPLETED" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
