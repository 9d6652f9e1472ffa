#!/usr/bin/env python3
"""The held-out program of issue 13, timed the way its filers time it.

A plain LibTorch CNN + SGD program (lockstep-cnn-sgd-plain) against the same
program made data-parallel with DistributedOptimizer as docs/torch.md shows
(lockstep-cnn-sgd): every variant once per round, --rounds interleaved
rounds, medians, ratios; a table and one JSON line per variant.

Variants ("tuned" = MALLOC_TRIM_THRESHOLD_/MALLOC_MMAP_THRESHOLD_, the
settings lt::init() applies with mallopt):
  plain-1x1[-tuned]   one process, 1 intra-op thread
  plain-1xN[-tuned]   one process, N threads
  indep-Nx1-tuned     N independent plain 1x1 processes at once, no
                      communication: what N cores give N processes (ceiling)
  lockstep-1          the lockstep program run directly (one process)
  lockstep-N          lockstep run -np N
Arguments after -- go to every program (e.g. -- --window-steps 40).
"""
import argparse, json, os, statistics, subprocess, sys

TUNED = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(256 << 20)}


def variants(bin_dir, np, extra):
    plain = [f"{bin_dir}/lockstep-cnn-sgd-plain"] + extra
    dist = [f"{bin_dir}/lockstep-cnn-sgd"] + extra
    v = {
        "plain-1x1": [(plain + ["--threads", "1"], {})],
        "plain-1x1-tuned": [(plain + ["--threads", "1"], TUNED)],
        f"plain-1x{np}": [(plain + ["--threads", str(np)], {})],
        f"plain-1x{np}-tuned": [(plain + ["--threads", str(np)], TUNED)],
        f"indep-{np}x1-tuned": [(plain + ["--threads", "1"], TUNED)] * np,
        # One thread, like plain-1x1: alone on an idle host, the placement
        # rule would give a single worker every CPU.
        "lockstep-1": [(dist, {"LOCKSTEP_INTRA_OP_THREADS": "1"})],
        f"lockstep-{np}": [([f"{bin_dir}/lockstep", "run", "-np", str(np), "--no-prefix-output",
                             "--"] + dist, {})],
    }
    return v


def run(procs):
    """Starts every (argv, env) at once; returns the summed samples/s."""
    running = [subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE,
                                text=True) for argv, env in procs]
    total, rows = 0.0, []
    for p in running:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"cnn_sgd.py: {p.args} exited with {p.returncode}")
        for line in out.splitlines():
            if line.strip().startswith("{"):
                j = json.loads(line)
                total += j["samples_per_s"]
                rows.append(j)
    return total, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default="build")
    ap.add_argument("--only", default="", help="comma-separated variants")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:K=V,K=V",
                    help="also run lockstep-NP with these environment variables, as NAME "
                         "(e.g. spin0:LOCKSTEP_SPIN_US=0); repeatable")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    table = variants(f"{a.build}/bin", a.np, a.extra)
    for spec in a.variant:
        name, _, assigns = spec.partition(":")
        env = dict(kv.split("=", 1) for kv in assigns.split(",") if kv)
        if not name or name in table or any(not k for k in env):
            raise SystemExit(f"cnn_sgd.py: --variant {spec}: want NEW_NAME:K=V,K=V")
        table[name] = [(argv, {**e, **env}) for argv, e in table[f"lockstep-{a.np}"]]
    order = a.only.split(",") if a.only else list(table)
    if a.only:
        order += [spec.partition(":")[0] for spec in a.variant]
    for name in order:
        if name not in table:
            raise SystemExit(f"cnn_sgd.py: unknown variant {name} (one of {', '.join(table)})")
    results = {name: [] for name in order}
    for r in range(a.rounds):
        for name in order:
            print(f"round {r + 1}/{a.rounds}: {name}", file=sys.stderr, flush=True)
            sps, _ = run(table[name])
            results[name].append(sps)
    med = {n: statistics.median(v) for n, v in results.items()}
    np = a.np
    print(f"{'variant':<22} {'median samples/s':>17}  rounds")
    for n in order:
        print(f"{n:<22} {med[n]:>17.0f}  " + " ".join(f"{x:.0f}" for x in results[n]))
    def best(*names):
        vals = [med[n] for n in names if n in med]
        return max(vals) if vals else None
    ratios = []
    dist_n, dist_1 = med.get(f"lockstep-{np}"), med.get("lockstep-1")
    p11, p11t = best("plain-1x1", "plain-1x1-tuned"), med.get("plain-1x1-tuned")
    p1n, ceil = best(f"plain-1x{np}", f"plain-1x{np}-tuned"), med.get(f"indep-{np}x1-tuned")
    if dist_n and ceil: ratios.append((f"lockstep {np} workers / {np} independent plain (ceiling)", dist_n / ceil, 0.97))
    if dist_n and p1n: ratios.append((f"lockstep {np} workers / best plain 1x{np}", dist_n / p1n, 1.05))
    if dist_n and p11: ratios.append((f"lockstep {np} workers / best plain 1x1", dist_n / p11, None))
    if dist_1 and p11t: ratios.append(("lockstep 1 worker / plain 1x1 tuned", dist_1 / p11t, 0.98))
    for label, value, goal in ratios:
        print(f"{label:<58} {value:6.3f}" + (f"   (goal >= {goal})" if goal else ""))
    for n in order:
        print(json.dumps({"variant": n, "median_samples_per_s": med[n], "rounds": results[n]}))
    for label, value, goal in ratios:
        print(json.dumps({"ratio": label, "value": value, "goal": goal}))


if __name__ == "__main__":
    main()
