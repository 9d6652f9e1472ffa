#!/usr/bin/env python3
"""Reads the per-rank step traces of `lockstep-cnn-sgd --trace PREFIX` and
splits each synchronous step at the last rank's arrival.

Each line of PREFIX.<rank> holds one step's six CLOCK_MONOTONIC stamps (ns):
start, after data, after forward, after backward (the gradient hand-off),
after synchronize() and after the optimizer step. Per step:
  skew   = last rank's hand-off - first rank's hand-off (the wait for the
           slower rank, not lockstep's to recover)
  after  = the last rank to leave synchronize() - the last hand-off: lockstep's
           own share (negotiation, allreduce, wake-ups)
Prints mean / median / p90 in microseconds and one JSON line.

usage: cnn_sgd_trace.py PREFIX [--ranks N]
"""
import argparse
import json
import statistics


def load(prefix, ranks):
    return [[[int(x) for x in line.split()] for line in open(f"{prefix}.{r}")] for r in range(ranks)]


def summary(xs):
    xs = sorted(xs)
    return {"mean_us": statistics.fmean(xs), "median_us": xs[len(xs) // 2],
            "p90_us": xs[int(0.9 * (len(xs) - 1))]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prefix")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--skip", type=int, default=10, help="warm-up steps to drop")
    a = ap.parse_args()
    traces = load(a.prefix, a.ranks)
    steps = min(len(t) for t in traces)
    skew, after, compute = [], [], []
    for s in range(a.skip, steps):
        handoff = [t[s][3] for t in traces]
        resumed = [t[s][4] for t in traces]
        skew.append((max(handoff) - min(handoff)) / 1e3)
        after.append((max(resumed) - max(handoff)) / 1e3)
        compute.append(statistics.fmean((t[s][3] - t[s][0]) / 1e3 for t in traces))
    out = {"steps": len(after), "after_last_arrival": summary(after), "skew": summary(skew),
           "compute": summary(compute)}
    for k in ("after_last_arrival", "skew", "compute"):
        v = out[k]
        print(f"{k:20s} mean {v['mean_us']:9.1f}  median {v['median_us']:9.1f}  p90 {v['p90_us']:9.1f} us")
    print(json.dumps({"cnn_sgd_trace": a.prefix, **out}))


if __name__ == "__main__":
    main()
