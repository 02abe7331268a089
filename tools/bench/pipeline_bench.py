#!/usr/bin/python3
"""Helper of tools/bench/pipeline_bench.sh: follows one job and turns the runs into a table.

  pipeline_bench.py follow --cli LONGHAUL --config alpha.yaml --job JOB.yaml --out RUN.json
      Submits the job, polls `longhaul status JOB -o json` every --poll seconds until the job
      ends, and writes every sample (wall time since submission, step, stages, links) and the
      final status (all losses) to RUN.json.
  pipeline_bench.py report RUN.json...
      Prints a Markdown table: the target loss and, per run, the step and the seconds at which
      the trailing mean of the loss first reaches it, the final loss, tokens/s, the measured
      step time against the bound max(slowest stage compute, slowest link's wire bytes per
      step / its rate), the speedups of adaptive over the other runs of its scenario, and
      per run and phase (split at scheduled rate changes) the details and CPU use.
  pipeline_bench.py predict --cli LONGHAUL --delay 10ms RUN.json...
      The cost model against the runs: for each static run, a profiles file of what was
      measured or set (each site's FLOP/s from its stage's measured compute seconds per step,
      each link's linkem rate, and its RTT from the link monitors' estimates during the run, or
      2 x delay with --rtt nominal), `longhaul plan JOB --profiles` for the
      job's own placement (the even split in the job's order, as submitted), and a Markdown
      table of the measured steady step time (steps from 30% of the run to its end) against
      the predicted one, with the error and the predicted bottleneck.
  pipeline_bench.py estimates RUN.json... [--from 5] [--after 1,2,3,4,5,8,11]
      The link monitors' bandwidth estimates as the runs polled them (`longhaul status`, every
      --poll seconds of `follow`): per run and directed link, the median [min-max] from
      --from seconds after submission to the end (split at scheduled rate changes), and for
      each scheduled change the estimate of both directions of that link at the first poll
      at or after each of --after seconds past it.
  pipeline_bench.py ports N
      Prints N distinct free TCP ports below the ephemeral range.

Only the Python standard library; run it with /usr/bin/python3.
"""
import argparse
import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time

TERMINAL = {"JOB_STATE_COMPLETED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}


def cli_json(cli, config, *args):
    out = subprocess.run([cli, "--config", config, *args, "-o", "json"], capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def cpu_seconds(pids):
    """CPU seconds (user + system) that processes `pids` have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def cpu_snapshot(a):
    groups = {}
    for item in (a.cpu_pids or "").split(";"):
        if item:
            name, pids = item.split("=")
            groups[name] = cpu_seconds(pids.split(","))
    return {"cpu": groups, "loadavg": float(open("/proc/loadavg").read().split()[0]),
            "total_cpu": sum(map(float, open("/proc/stat").readline().split()[1:8])) /
            os.sysconf("SC_CLK_TCK"),
            "idle_cpu": sum(map(float, open("/proc/stat").readline().split()[4:6])) /
            os.sysconf("SC_CLK_TCK")}


def follow(a):
    cpu_start = cpu_snapshot(a)
    t_submit = time.time()
    out = subprocess.run([a.cli, "--config", a.config, "submit", a.job], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"pipeline_bench: submit failed: {out.stderr.strip()}")
    m = re.search(r"submitted job (\S+)", out.stdout)
    if not m:
        sys.exit(f"pipeline_bench: cannot parse submit output: {out.stdout!r}")
    job_id = m.group(1)
    samples, last, errors, printed = [], None, 0, -1
    deadline = t_submit + a.timeout
    while True:
        t = time.time()
        try:
            st = cli_json(a.cli, a.config, "status", job_id)
            errors = 0
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            errors += 1
            if errors > 20:
                sys.exit(f"pipeline_bench: status keeps failing: {e}")
            time.sleep(a.poll)
            continue
        step = int(st.get("step", 0))
        samples.append({
            "t": round(t - t_submit, 3),
            "step": step,
            "state": st.get("state"),
            "step_seconds": st.get("step_seconds", 0),
            "dropped_replicas": st.get("dropped_replicas", []),
            "stages": [{k: s.get(k, 0) for k in ("site", "compute_seconds", "wait_seconds",
                                                  "step_seconds")} for s in st.get("stages", [])],
            "links": [{k: l.get(k) for k in ("from_site", "to_site", "codec", "raw_bytes",
                                             "wire_bytes", "bandwidth_bytes_per_second",
                                             "rtt_seconds")}
                      for l in st.get("links", [])],
        })
        last = st
        if a.progress and step // 10 != printed // 10:
            printed = step
            codecs = ",".join(f"{l.get('from_site')}>{l.get('to_site')}:{l.get('codec')}"
                              for l in st.get("links", []))
            print(f"  [{a.label}] t={t - t_submit:6.1f}s step {step}/{st.get('total_steps')} "
                  f"loss {st.get('loss', 0):.4f} {codecs}", file=sys.stderr, flush=True)
        if st.get("state") in TERMINAL:
            break
        if t > deadline:
            subprocess.run([a.cli, "--config", a.config, "cancel", job_id], capture_output=True)
            print(f"pipeline_bench: {a.label}: timed out after {a.timeout}s", file=sys.stderr)
            break
        time.sleep(max(0.0, a.poll - (time.time() - t)))
    cpu_end = cpu_snapshot(a)
    rates = dict(item.split("=") for item in a.rates.split(",")) if a.rates else {}
    changes = []
    for c in a.change or []:  # AT:PAIR:RATE, AT in seconds since --links-started
        at, pair, rate = c.split(":")
        changes.append([round(a.links_started + float(at) - t_submit, 3), pair, rate])
    json.dump({"label": a.label, "scenario": a.scenario, "job_id": job_id, "job": a.job,
               "rates": rates, "changes": changes, "samples": samples, "final": last,
               "cpu_start": cpu_start, "cpu_end": cpu_end, "cores": os.cpu_count()},
              open(a.out, "w"))
    if last.get("state") != "JOB_STATE_COMPLETED":
        sys.exit(f"pipeline_bench: {a.label}: job ended {last.get('state')}: {last.get('detail')}")


def parse_rate(s):
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)(bit|bps)?", s.strip().lower())
    if not m:
        raise ValueError(f"bad rate {s!r}")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8  # bytes/s


def trailing_mean(losses, k):
    return [statistics.fmean(losses[max(0, i - k + 1):i + 1]) for i in range(len(losses))]


def time_of_step(samples, step):
    """Seconds since submission at which `step` steps were complete (interpolated)."""
    prev = None
    for s in samples:
        if s["step"] >= step:
            if prev is None or s["step"] == prev["step"]:
                return s["t"]
            f = (step - prev["step"]) / (s["step"] - prev["step"])
            return prev["t"] + f * (s["t"] - prev["t"])
        prev = s
    return None


def rates_at(run, t):
    """Nominal rate (bytes/s) of every directed link at time t since submission."""
    rates = {}
    for pair, rate in run["rates"].items():
        x, y = pair.split("-")
        rates[f"{x}-{y}"] = rates[f"{y}-{x}"] = parse_rate(rate)
    for at, pair, rate in run.get("changes", []):
        if t >= at:
            x, y = pair.split("-")
            rates[f"{x}-{y}"] = rates[f"{y}-{x}"] = parse_rate(rate)
    return rates


def wire_at(sample):
    return {f"{l['from_site']}-{l['to_site']}": int(l.get("wire_bytes") or 0)
            for l in sample["links"]}


def phase_bound(run, samples, t0, t1):
    """The bound on the step time between t0 and t1: max(slowest stage compute, slowest link's
    wire bytes per step / its nominal rate), from the samples nearest t0 and t1."""
    inside = [s for s in samples if t0 <= s["t"] <= t1 and s["step"] >= 1]
    if len(inside) < 2 or inside[-1]["step"] <= inside[0]["step"]:
        return None
    a, b = inside[0], inside[-1]
    steps = b["step"] - a["step"]
    wa, wb = wire_at(a), wire_at(b)
    rates = rates_at(run, (t0 + t1) / 2)
    link = {}
    for pair, w in wb.items():
        if pair in rates:
            link[pair] = (w - wa.get(pair, 0)) / steps / rates[pair]
    per_stage = {}
    for s in inside:
        for st in s["stages"]:
            per_stage.setdefault(st["site"], []).append(float(st.get("compute_seconds", 0)))
    max_compute = max((statistics.median(v) for v in per_stage.values()), default=0)
    max_link = max(link.values(), default=0)
    return {"steps": steps, "seconds": b["t"] - a["t"], "step_time": (b["t"] - a["t"]) / steps,
            "max_compute": max_compute, "max_link": max_link,
            "bound": max(max_compute, max_link), "link": link}


def analyse(run, window, target):
    final = run["final"]
    losses = [float(x) for x in final.get("losses", [])]
    steps = int(final.get("step", len(losses)))
    smooth = trailing_mean(losses, window)
    hit = next((i + 1 for i, v in enumerate(smooth) if v <= target), None) if target else None
    samples = run["samples"]
    t_first = time_of_step(samples, 1)
    t_end = time_of_step(samples, steps)
    # Steady step time: from the end of step 1 (stage setup excluded) to the end of the run.
    step_time = (t_end - t_first) / (steps - 1) if steps > 1 and t_end and t_first else None
    tokens = round(final.get("tokens_per_second", 0) * final.get("step_seconds", 0)) or None
    # Phases: split at scheduled rate changes; the bound is per phase, weighted by its steps.
    cuts = [t_first or 0] + sorted(c[0] for c in run.get("changes", [])
                                   if (t_first or 0) < c[0] < (t_end or 0)) + [t_end or 0]
    phases = [phase_bound(run, samples, cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]
    phases = [p for p in phases if p]
    n = sum(p["steps"] for p in phases)
    bound = sum(p["bound"] * p["steps"] for p in phases) / n if n else 0
    max_compute = sum(p["max_compute"] * p["steps"] for p in phases) / n if n else 0
    max_link = sum(p["max_link"] * p["steps"] for p in phases) / n if n else 0
    links = []
    for l in final.get("links", []):
        wire, raw = int(l.get("wire_bytes") or 0), int(l.get("raw_bytes") or 0)
        links.append({"pair": f"{l['from_site']}-{l['to_site']}", "raw": raw, "wire": wire,
                      "ratio": raw / wire if wire else 0, "wire_per_step": wire / steps,
                      "estimate_mbit": float(l.get("bandwidth_bytes_per_second") or 0) * 8 / 1e6})
    codecs = {}
    for s in samples:
        for l in s["links"]:
            seq = codecs.setdefault(f"{l['from_site']}-{l['to_site']}", [])
            if l.get("codec") and (not seq or seq[-1] != l["codec"]):
                seq.append(l["codec"])
    cpu = {}
    if run.get("cpu_end"):
        for name, v in run["cpu_end"]["cpu"].items():
            cpu[name] = (v - run["cpu_start"]["cpu"].get(name, 0)) / steps
        wall = run["cpu_end"]["total_cpu"] - run["cpu_start"]["total_cpu"]
        idle = run["cpu_end"]["idle_cpu"] - run["cpu_start"]["idle_cpu"]
        cpu["machine busy"] = 1 - idle / wall if wall > 0 else 0
        cpu["loadavg"] = (run["cpu_start"]["loadavg"], run["cpu_end"]["loadavg"])
    return {
        "cpu": cpu, "cores": run.get("cores"),
        "label": run["label"], "scenario": run["scenario"], "steps": steps, "losses": losses,
        "smooth": smooth, "hit_step": hit,
        "hit_seconds": time_of_step(samples, hit) if hit else None,
        "final_loss": losses[-1] if losses else None,
        "final_smooth": smooth[-1] if smooth else None,
        "total_seconds": t_end, "step_time": step_time,
        "tokens_per_second": tokens / step_time if tokens and step_time else None,
        "tokens_per_step": tokens, "phases": phases, "max_compute": max_compute,
        "links": links, "max_link": max_link, "bound": bound,
        "efficiency": bound / step_time if step_time else None, "codecs": codecs,
    }


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def report(a):
    runs = [json.load(open(p)) for p in a.runs]
    runs = [r for r in runs if isinstance(r, dict) and "samples" in r]  # not report.json
    # The target: the trailing-mean loss the reference run (compression off, first scenario)
    # has at --target-fraction of its steps, unless given.
    target = a.target
    if target is None:
        offs = [r for r in runs if r["label"] == a.reference]
        if not offs:
            sys.exit(f"pipeline_bench: no run '{a.reference}' to set the target; pass --target")
        ref = next((r for r in offs if r["scenario"] == "static"), offs[0])
        losses = [float(x) for x in ref["final"]["losses"]]
        target = trailing_mean(losses, a.window)[round(len(losses) * a.target_fraction) - 1]
        print(f"Target loss {target:.4f}: the trailing mean over {a.window} steps that run "
              f"'{ref['scenario']} / {a.reference}' reaches at {a.target_fraction:.0%} "
              "of its steps.\n")
    else:
        print(f"Target loss {target:.4f} (trailing mean over {a.window} steps).\n")
    res = [analyse(r, a.window, target) for r in runs]
    print("| scenario | run | to target: step | to target: seconds | all steps: seconds | "
          f"final loss (mean of last {a.window}) | tokens/s | step time | "
          "bound (compute / link) | efficiency | pipeline links: wire kB/step (ratio) | "
          "codecs chosen |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res:
        pl = ", ".join(f"{l['pair']} {l['wire_per_step'] / 1e3:.0f} (x{l['ratio']:.1f})"
                       for l in r["links"])
        codecs = "; ".join(f"{k}: {' > '.join(v)}" for k, v in sorted(r["codecs"].items()))
        print(f"| {r['scenario']} | {r['label']} | {fmt(r['hit_step'], 'd', 'never')} | "
              f"{fmt(r['hit_seconds'], '.1f')} | {fmt(r['total_seconds'], '.1f')} | "
              f"{fmt(r['final_loss'], '.4f')} "
              f"({fmt(r['final_smooth'], '.4f')}) at {r['steps']} | "
              f"{fmt(r['tokens_per_second'], '.0f')} | {fmt(r['step_time'], '.3f')} s | "
              f"{r['bound']:.3f} s ({r['max_compute']:.3f} / {r['max_link']:.3f}) | "
              f"{fmt(r['efficiency'], '.0%')} | "
              f"{pl} | {codecs} |")
    print()
    print("Speedups in time to the target loss (and in tokens/s), same scenario:\n")
    for scen in dict.fromkeys(r["scenario"] for r in res):
        rs = [r for r in res if r["scenario"] == scen]
        for x in rs:
            for y in rs:
                if x is y or not x["label"].startswith("adaptive"):
                    continue
                if not x["hit_seconds"] or not y["hit_seconds"]:
                    print(f"- {scen}: {x['label']} over {y['label']}: target not reached by both")
                    continue
                print(f"- {scen}: {x['label']} over {y['label']}: "
                      f"{y['hit_seconds'] / x['hit_seconds']:.2f}x to the target "
                      f"({y['hit_seconds']:.1f} s / {x['hit_seconds']:.1f} s), "
                      f"{y['total_seconds'] / x['total_seconds']:.2f}x for all steps, tokens/s "
                      f"{x['tokens_per_second'] / y['tokens_per_second']:.2f}x")
    print()
    print("Per run and phase (split at scheduled rate changes): steps, measured step time, "
          "slowest stage compute, per directed link seconds of wire bytes per step at its "
          "nominal rate; the monitor's final estimates.\n")
    for r in res:
        ph = " | ".join(
            f"{p['steps']} steps {p['step_time']:.3f} s/step, compute {p['max_compute']:.3f} s, "
            + ", ".join(f"{k} {v:.3f}" for k, v in sorted(p["link"].items()))
            for p in r["phases"])
        est = ", ".join(f"{l['pair']} {l['estimate_mbit']:.0f}" for l in r["links"])
        cpu = ""
        if r["cpu"]:
            c = r["cpu"]
            cpu = (f"; CPU per step: daemons {c.get('daemons', 0):.3f} s, linkem "
                   f"{c.get('linkem', 0):.3f} s; machine {c['machine busy']:.0%} busy "
                   f"({r['cores']} cores), load average {c['loadavg'][0]:.1f} -> "
                   f"{c['loadavg'][1]:.1f}")
        print(f"- {r['scenario']} / {r['label']}: {fmt(r['total_seconds'], '.1f')} s in all; "
              f"{ph}; estimates (Mbit/s) {est}{cpu}")
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


def mbit(v):
    return float(v or 0) * 8 / 1e6


def estimate_series(samples):
    """{directed link: [(t, Mbit/s)]}: every poll's estimate of every link that has one."""
    out = {}
    for x in samples:
        for l in x["links"]:
            if l.get("bandwidth_bytes_per_second"):
                out.setdefault(f"{l['from_site']}-{l['to_site']}", []).append(
                    (x["t"], mbit(l["bandwidth_bytes_per_second"])))
    return out


def estimates(a):
    after = [float(x) for x in a.after.split(",") if x]
    rows, falls = [], []
    for path in a.runs:
        run = json.load(open(path))
        if not isinstance(run, dict) or "samples" not in run:
            continue  # report.json
        name = f"{run['scenario']} / {run['label']}"
        series = estimate_series(run["samples"])
        end = max((x["t"] for x in run["samples"]), default=0.0)
        cuts = [a.from_s] + sorted(c[0] for c in run.get("changes", []) if c[0] > a.from_s)
        cuts.append(max(end, cuts[-1]) + 1)
        for pair, ts in series.items():
            for lo, hi in zip(cuts, cuts[1:]):
                v = [e for t, e in ts if lo <= t < hi]
                if not v:
                    continue
                rate = rates_at(run, lo).get(pair)
                rows.append((name, pair, f"{8 * rate / 1e6:.0f}" if rate else "?",
                             f"{lo:.1f}-{min(hi, end):.1f} s", len(v), statistics.median(v),
                             min(v), max(v)))
        for at, pair, rate in run.get("changes", []):
            x, y = pair.split("-")
            for d in (f"{x}-{y}", f"{y}-{x}"):
                ts = series.get(d)
                if not ts:
                    continue
                vals = []
                for k in after:
                    e = next((e for t, e in ts if t >= at + k), None)
                    vals.append("-" if e is None else f"{e:.0f}")
                falls.append((name, d, f"{pair} to {rate} at {at:.1f} s", vals))
    print(f"Link estimates (Mbit/s) polled from {a.from_s:g} s after submission: "
          "median [min-max].\n")
    print("| run | link | nominal Mbit/s | polls from | polls | median [min-max] |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.0f} [{r[6]:.0f}-{r[7]:.0f}] |")
    if falls:
        print("\nEstimates (Mbit/s) of a changed link at the first poll at or after each time "
              "past its scheduled change:\n")
        print("| run | direction | change | " + " | ".join(f"{k:g} s" for k in after) + " |")
        print("|---|---|---|" + "---|" * len(after))
        for name, d, change, vals in falls:
            print(f"| {name} | {d} | {change} | " + " | ".join(vals) + " |")


def ports(a):
    """Prints N distinct ports that are free now, below the ephemeral range."""
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    held, out = [], []
    for p in random.sample(range(max(1024, lo - 12000), lo), min(2000, lo - 1024)):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            s.close()
            continue
        held.append(s)  # held until all are chosen: no duplicates
        out.append(p)
        if len(out) == a.n:
            break
    print(" ".join(map(str, out)))


def measured_rtts(samples, first):
    """Per directed link, the median of the link monitors' RTT estimates from step `first`."""
    seen = {}
    for x in samples:
        if x["step"] < first:
            continue
        for l in x["links"]:
            if l.get("rtt_seconds"):
                seen.setdefault(f"{l['from_site']}-{l['to_site']}", []).append(l["rtt_seconds"])
    return {k: statistics.median(v) for k, v in seen.items()}


def write_profiles(path, sites, flops, rates, rtt):
    with open(path, "w") as f:
        f.write("sites:\n")
        for site in sites:
            f.write(f"  - {{name: {site}, flops: {flops[site]:.6g}}}\n")
        f.write("links:\n")
        for x in sites:
            for y in sites:
                if x != y:
                    f.write(f"  - {{from: {x}, to: {y}, bandwidth: {rates[f'{x}-{y}']:.6g} B/s, "
                            f"rtt: {rtt.get(f'{x}-{y}', rtt['default']):.6g} s, "
                            f"symmetric: false}}\n")


def plan_even_split(cli, job, profiles):
    out = subprocess.run([cli, "plan", job, "--profiles", profiles, "-o", "json"],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"longhaul plan: {out.stderr.strip()}")
    even = json.loads(out.stdout).get("even_split")
    if not even:
        raise RuntimeError("longhaul plan gave no even_split estimate")
    return even


def predict(a):
    rows, errors = [], []
    for path in a.runs:
        run = json.load(open(path))
        if run.get("changes"):
            continue  # the cost model is of steady links
        samples = [x for x in run["samples"] if x["step"] > 0]
        final = run["final"]
        total = int(final.get("step", 0))
        first = max(2, int(math.ceil(a.from_fraction * total)))
        t0, t1 = time_of_step(samples, first), time_of_step(samples, total)
        if t0 is None or t1 is None or total <= first:
            print(f"pipeline_bench: {path}: too few steps", file=sys.stderr)
            continue
        measured = (t1 - t0) / (total - first)
        stages = final.get("stages", [])
        sites = [st["site"] for st in stages]
        compute = {}
        for i, site in enumerate(sites):
            values = [x["stages"][i]["compute_seconds"] for x in samples
                      if x["step"] >= first and len(x["stages"]) > i and
                      x["stages"][i].get("compute_seconds")]
            compute[site] = statistics.median(values)
        rates = rates_at(run, 0)
        rtt = {"default": 2 * parse_time(a.delay)}
        if a.rtt == "measured":  # the link monitors' estimates (heartbeat round trips)
            rtt.update(measured_rtts(samples, first))
        tmp = path + ".profiles.yaml"
        # Compute scales as 1/FLOP/s: price at a nominal rate, then rescale to what was measured.
        nominal = {site: 1e12 for site in sites}
        write_profiles(tmp, sites, nominal, rates, rtt)
        even = plan_even_split(a.cli, run["job"], tmp)
        flops = {}
        for i, site in enumerate(sites):
            e = even["stages"][i]
            if e["site"] != site or int(e["layer_begin"]) != int(stages[i]["layer_begin"]) or \
                    int(e["layer_end"]) != int(stages[i]["layer_end"]):
                raise RuntimeError(f"{path}: the plan's even split differs from the run's stages")
            flops[site] = 1e12 * e["compute_seconds"] / compute[site]
        write_profiles(tmp, sites, flops, rates, rtt)
        even = plan_even_split(a.cli, run["job"], tmp)
        predicted = even["step_seconds"]
        err = 100 * (predicted - measured) / measured
        errors.append(abs(err))
        links = ", ".join(f"{k} {8 * parse_rate(v) / 1e6:.0f}" for k, v in run["rates"].items())
        codecs = ",".join(sorted({l.get("codec", "") for l in final.get("links", [])}))
        rtts = "/".join(f"{1e3 * rtt.get(f'{x}-{y}', rtt['default']):.0f}"
                        for x, y in zip(sites, sites[1:]))
        rows.append((run["label"], links + f"; RTT {rtts} ms", codecs,
                     " / ".join(f"{compute[s]:.3f}" for s in sites), measured, predicted, err,
                     even.get("bottleneck_description") or even.get("period_limit", "")))
    print("| run | links (Mbit/s) | codecs seen | stage compute s/step (measured) | "
          "measured step s | predicted step s | error | predicted bottleneck |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:+.1f}% | "
              f"{r[7]} |")
    if errors:
        print(f"\nlargest |error| {max(errors):.1f}%, mean {statistics.fmean(errors):.1f}% over "
              f"{len(errors)} runs")


def parse_time(s):
    m = re.fullmatch(r"([0-9.]+)\s*(us|ms|s)?", s.strip())
    if not m:
        raise ValueError(f"bad time {s!r}")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1, None: 1}[m.group(2)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("follow")
    f.add_argument("--cli", required=True)
    f.add_argument("--config", required=True)
    f.add_argument("--job", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--label", default="run")
    f.add_argument("--scenario", default="static")
    f.add_argument("--poll", type=float, default=0.5)
    f.add_argument("--timeout", type=float, default=900)
    f.add_argument("--progress", action="store_true")
    f.add_argument("--rates", help="the links' nominal rates, PAIR=RATE,... (both directions)")
    f.add_argument("--links-started", type=float, default=0, help="epoch seconds")
    f.add_argument("--change", action="append", help="AT:PAIR:RATE, a scheduled rate change")
    f.add_argument("--cpu-pids", help="NAME=PID,PID;... processes whose CPU time to account")
    r = sub.add_parser("report")
    r.add_argument("runs", nargs="+")
    r.add_argument("--window", type=int, default=5)
    r.add_argument("--target", type=float)
    r.add_argument("--target-fraction", type=float, default=0.65)
    r.add_argument("--reference", default="off")
    r.add_argument("--json")
    c = sub.add_parser("predict")
    c.add_argument("runs", nargs="+")
    c.add_argument("--cli", required=True)
    c.add_argument("--delay", default="10ms", help="linkem's one-way delay on every link")
    c.add_argument("--from-fraction", type=float, default=0.3)
    c.add_argument("--rtt", choices=["measured", "nominal"], default="measured",
                   help="RTT: the link monitors' estimates from the run, or 2 x --delay")
    e = sub.add_parser("estimates")
    e.add_argument("runs", nargs="+")
    e.add_argument("--from", dest="from_s", type=float, default=5.0,
                   help="seconds after submission from which polls count")
    e.add_argument("--after", default="1,2,3,4,5,8,11",
                   help="seconds past each scheduled rate change to show")
    q = sub.add_parser("ports")
    q.add_argument("n", type=int)
    a = p.parse_args()
    {"follow": follow, "report": report, "predict": predict, "estimates": estimates,
     "ports": ports}[a.cmd](a)


if __name__ == "__main__":
    main()
