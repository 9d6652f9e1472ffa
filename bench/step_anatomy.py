#!/usr/bin/env python3
"""The anatomy of a training step from a main-job run directory.

Reads RUN_DIR/metrics.jsonl (the per-step lines: step_ms, comm_wait_share)
and RUN_DIR/timeline.json (the engine's timeline, rank 0; docs/engine.md) and
prints, per optimizer step, side by side: the step time, the part of it spent
waiting for gradient collectives (exposed communication) and the rest
(compute: forward, backward, optimizer, data), and the time the collectives'
phases took (fusion copies in, the collective, copies out; the union over
tensors, so a fused batch counts once). On a GPU run the phases are the
device's (CUDA events; the COLLECTIVE events say "GPU time"). Prints a table
and one JSON line.

  python3 bench/step_anatomy.py RUN_DIR [--skip-steps N]
"""
import argparse
import json
import os
import sys

PHASES = ("FUSE_COPY_IN", "COLLECTIVE", "COPY_OUT")


def read_steps(path, skip):
    steps = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") == "step" and rec.get("step", 0) > skip:
                steps.append(rec)
    return steps


def read_trace(path):
    with open(path) as f:
        text = f.read().rstrip()
    if text.endswith(","):  # a writer that was killed: close the array
        text = text[:-1] + "]"
    return json.loads(text)


def union_us(intervals):
    total, end = 0.0, None
    for begin, finish in sorted(intervals):
        if end is None or begin > end:
            total += finish - begin
            end = finish
        elif finish > end:
            total += finish - end
            end = finish
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--skip-steps", type=int, default=20, help="warm-up steps left out")
    args = ap.parse_args()
    metrics = os.path.join(args.run_dir, "metrics.jsonl")
    timeline = os.path.join(args.run_dir, "timeline.json")
    for path in (metrics, timeline):
        if not os.path.exists(path):
            sys.exit(f"step_anatomy: {path} is missing: run the main job with --run-dir "
                     f"{args.run_dir} (and --log-every 1 for per-step lines)")
    steps = read_steps(metrics, args.skip_steps)
    if not steps:
        sys.exit(f"step_anatomy: no step lines past step {args.skip_steps} in {metrics}: "
                 "use --log-every 1 and more --max-steps")
    step_ms = sum(s["step_ms"] for s in steps) / len(steps)
    wait_ms = sum(s["step_ms"] * s.get("comm_wait_share", 0.0) for s in steps) / len(steps)
    names, phases, gpu = {}, {p: [] for p in PHASES}, False
    for ev in read_trace(timeline):
        if ev.get("name") == "thread_name":
            names[ev["tid"]] = ev["args"]["name"]
        elif ev.get("ph") == "X" and ev.get("name") in phases:
            if names.get(ev["tid"], "").startswith("bcast."):
                continue  # the start-up broadcasts are not part of a step
            phases[ev["name"]].append((ev["ts"], ev["ts"] + ev["dur"]))
            gpu = gpu or ev.get("args", {}).get("algorithm") == "GPU time"
    last = steps[-1]["step"]
    per_step = {p: union_us(v) / 1e3 / max(last, 1) for p, v in phases.items()}
    row = {"bench": "step_anatomy", "run_dir": args.run_dir, "steps": len(steps),
           "step_ms": step_ms, "compute_ms": step_ms - wait_ms, "exposed_wait_ms": wait_ms,
           "phase_clock": "gpu" if gpu else "host",
           **{f"{p.lower()}_ms": v for p, v in per_step.items()}}
    print(f"{'step ms':>9} {'compute':>9} {'exp.wait':>9} {'copy in':>9} {'collect.':>9} "
          f"{'copy out':>9}  (per step, mean of {len(steps)} steps; phases: {row['phase_clock']} clock)")
    print(f"{step_ms:9.3f} {row['compute_ms']:9.3f} {wait_ms:9.3f} "
          + " ".join(f"{per_step[p]:9.3f}" for p in PHASES))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
