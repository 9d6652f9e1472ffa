#!/usr/bin/python3
"""Aggregates time-to-accuracy runs the MLPerf way and compares jobs.

Input: JSON lines with job, seed, target_accuracy, time_to_target_s,
wall_to_target_s, epochs_to_target (null when the run missed), as written
by bench/time_to_accuracy.sh. Per job: the runs sorted by seed, then the
aggregate over the last 5 runs per (job, target): drop the fastest and the
slowest, mean of the rest. A miss counts as the slowest run; with more than
one miss among the 5 the aggregate is undefined ("failed"). A study with
fewer runs is labelled as such (a trimmed mean of 3-4, a plain mean of 1-2). Prints a human
table, then one JSON line per job and one per ratio lockstep / other job.

  bench/peer/mlperf_report.py RESULTS.jsonl [--target 0.9] [--runs 5]
"""
import argparse
import json
import math
import sys


def aggregate(times, runs):
    """MLPerf: drop fastest and slowest, mean of the rest; None = miss.

    With fewer runs than asked for, the same rule over what there is (at
    least 3), or the plain mean of 1-2 runs; `method` says which, so a short
    study is never reported as an MLPerf aggregate."""
    misses = sum(t is None for t in times)
    if misses > 1 or not times or (misses and len(times) < 3):
        return None, "failed"
    ordered = sorted(math.inf if t is None else t for t in times)
    if len(times) < 3:
        return sum(ordered) / len(ordered), f"plain mean of {len(times)} (not MLPerf)"
    kept = ordered[1:-1]
    method = "MLPerf" if len(times) >= runs else f"trimmed mean of {len(times)} (MLPerf wants {runs})"
    return sum(kept) / len(kept), method


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--runs", type=int, default=5, help="latest runs per job that count")
    a = p.parse_args()
    runs = {}
    with open(a.results) as f:
        for line in f:
            r = json.loads(line)
            if abs(r.get("target_accuracy", 0) - a.target) < 1e-9:
                runs.setdefault(r["job"], []).append(r)
    if not runs:
        sys.exit(f"mlperf_report: no runs for target {a.target} in {a.results}")
    print(f"time to {100 * a.target:g}% test accuracy (training s; wall s; epochs)")
    print(f"{'job':<10} {'seed':>4} {'train s':>9} {'wall s':>9} {'epochs':>7}")
    summary = {}
    for job, rs in sorted(runs.items()):
        rs = rs[-a.runs:]
        for r in sorted(rs, key=lambda r: r["seed"]):
            t = r["time_to_target_s"]
            if t is None:
                print(f"{job:<10} {r['seed']:>4} {'missed':>9}")
            else:
                print(f"{job:<10} {r['seed']:>4} {t:9.2f} {r['wall_to_target_s']:9.2f} "
                      f"{r['epochs_to_target']:7.2f}")
        agg, method = aggregate([r["time_to_target_s"] for r in rs], a.runs)
        wall, _ = aggregate([r["wall_to_target_s"] for r in rs], a.runs)
        epochs, _ = aggregate([r["epochs_to_target"] for r in rs], a.runs)
        summary[job] = {"job": job, "runs": len(rs),
                        "misses": sum(r["time_to_target_s"] is None for r in rs),
                        "time_to_target_s": agg, "wall_to_target_s": wall,
                        "epochs_to_target": epochs, "method": method}
    print()
    for job, s in summary.items():
        if s["time_to_target_s"] is None:
            print(f"{job:<10} aggregate: failed ({s['runs']} runs, {s['misses']} missed)")
        else:
            print(f"{job:<10} {s['method']}: {s['time_to_target_s']:.2f} s training, "
                  f"{s['wall_to_target_s']:.2f} s wall, {s['epochs_to_target']:.2f} epochs")
    ratios = []
    base = summary.get("lockstep", {}).get("time_to_target_s")
    for job, s in summary.items():
        if job == "lockstep" or not base or not s["time_to_target_s"]:
            continue
        ratio = base / s["time_to_target_s"]
        wall_ratio = summary["lockstep"]["wall_to_target_s"] / s["wall_to_target_s"]
        print(f"lockstep / {job}: {ratio:.3f}x training time, {wall_ratio:.3f}x wall "
              f"({1 / ratio:.2f}x faster)")
        ratios.append({"ratio": f"lockstep/{job}", "training": ratio, "wall": wall_ratio,
                       "target_accuracy": a.target})
    for s in summary.values():
        print(json.dumps(dict(s, target_accuracy=a.target)))
    for r in ratios:
        print(json.dumps(r))

if __name__ == "__main__":
    main()
