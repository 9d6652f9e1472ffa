#!/usr/bin/env python3
"""Reads lockstep's TensorBoard event files with TensorBoard itself.

Not run in CI: it needs the `tensorboard` Python package (pip install
tensorboard), which the build machines do not have. The CI test of the same
files is tests/summary (an independent reader with protoc); this script is
the check against the real consumer.

  python3 bench/tensorboard_check.py train RUN_DIR
      EventAccumulator over a main-job --run-dir: every tag with its count
      and step range, the config text, and per-step rows of metrics.jsonl
      side by side with train/loss, train/lr, train/grad_norm at the same
      steps (float32 in the events, so equal to ~7 digits); the epoch rows
      against epoch/train_loss and test/accuracy. Exit 1 on a mismatch or a
      missing tag.

  python3 bench/tensorboard_check.py sweep SWEEP_DIR [--serve]
      The HParams experiment (top directory) and each trial's session
      (trials/NNN): its hyper-parameters, status and last sweep/<metric>,
      side by side with journal.jsonl's "end" events. Exit 1 when a trial
      differs. With --serve it also starts `tensorboard --logdir SWEEP_DIR`
      and asks the HParams plugin's own HTTP API (experiment,
      session_groups), i.e. what the HParams tab would list.

bench/tensorboard_check.sh BUILD_DIR runs both below and checks them. A
main job and a sweep to try it on (from the build folder):

  bin/lockstep run -np 2 bin/lockstep-fashion-mnist --epochs 2 --train-subset 6000 \\
      --test-subset 1000 --log-every 5 --log-ranks --run-dir /tmp/tb/train
  bin/lockstep sweep --dir /tmp/tb/sweep --space SPACE.json --scheduler asha --budget-epochs 3 \\
      --trials 6 -np 1 -- bin/lockstep-fashion-mnist --lr {lr} --batch-size {batch_size} \\
      --epochs {epochs} --train-subset 3000 --test-subset 500 --run-dir {dir}
  (SPACE.json: {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
                "batch_size": {"type": "choice", "values": [32, 64, 128]}})
"""
import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request

from tensorboard.backend.event_processing import event_accumulator as ea_lib
from tensorboard.plugins.hparams import plugin_data_pb2

STATUS = {0: "UNKNOWN", 1: "SUCCESS", 2: "FAILURE", 3: "RUNNING"}
problems = []


def accumulator(path):
    ea = ea_lib.EventAccumulator(path, size_guidance={ea_lib.SCALARS: 0, ea_lib.TENSORS: 0})
    ea.Reload()
    return ea


def lines(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def by_step(ea, tag):
    if tag not in ea.Tags()["scalars"]:
        problems.append(f"no scalar tag {tag}")
        return {}
    return {e.step: e.value for e in ea.Scalars(tag)}


def compare(title, rows, columns):
    """rows: metrics lines; columns: (json field, {step: value} from TensorBoard)."""
    print(f"\n{title}")
    print("  step  " + "  ".join(f"{f:>14} {'(tb)':>12}" for f, _ in columns))
    for r in rows:
        cells = []
        for field, tb in columns:
            mine, theirs = r.get(field), tb.get(r["step"])
            ok = isinstance(mine, (int, float)) and theirs is not None and close(float(mine), theirs)
            if not ok:
                problems.append(f"step {r['step']}: {field} {mine} in metrics.jsonl, {theirs} in TensorBoard")
            cells.append(f"{mine if mine is not None else '-':>14.7g} {theirs if theirs is not None else '-':>12.7g}"
                         if ok else f"{str(mine):>14} {str(theirs):>12}")
        print(f"  {r['step']:>4}  " + "  ".join(cells))


def check_train(run_dir):
    ea = accumulator(run_dir)
    tags = ea.Tags()
    print(f"{run_dir}: scalar tags")
    for tag in sorted(tags["scalars"]):
        events = ea.Scalars(tag)
        print(f"  {tag:<28} {len(events):>5} points, steps {events[0].step}..{events[-1].step}")
    text = ea.PluginTagToContent("text")
    if "config" in tags.get("tensors", []):
        config = ea.Tensors("config")[0].tensor_proto.string_val[0].decode()
        print("config text:\n  " + config.replace("\n", "\n  "))
    elif not text:
        problems.append("no config text")
    metrics = lines(os.path.join(run_dir, "metrics.jsonl"))
    steps = [m for m in metrics if m.get("kind") == "step"]
    epochs = [m for m in metrics if m.get("kind") != "step" and "train_loss" in m]
    compare("per-step rows (metrics.jsonl) against TensorBoard", steps,
            [(f, by_step(ea, "train/" + f)) for f in ("loss", "lr", "grad_norm", "comm_wait_share")])
    ranks = [t for t in tags["scalars"] if t.startswith("rank_")]
    if steps and "ranks" in steps[0]:
        print(f"per-rank tags: {', '.join(sorted(ranks))}")
        for k in range(len(steps[0]["ranks"])):
            tb = by_step(ea, f"rank_{k}/step_ms")
            for s in steps:
                if not close(s["ranks"][k]["step_ms"], tb.get(s["step"], float("nan"))):
                    problems.append(f"rank {k} step {s['step']}: step_ms differs")
    compare("epoch rows against TensorBoard", epochs,
            [("train_loss", by_step(ea, "epoch/train_loss")), ("test_accuracy", by_step(ea, "test/accuracy"))])


def plugin_data(ea, tag):
    content = ea.PluginTagToContent("hparams").get(tag)
    return plugin_data_pb2.HParamsPluginData.FromString(content) if content is not None else None


def value_of(v):
    kind = v.WhichOneof("kind")
    return getattr(v, kind) if kind else None


def check_sweep(sweep_dir, serve):
    top = plugin_data(accumulator(sweep_dir), "_hparams_/experiment")
    if top is None:
        problems.append("no _hparams_/experiment in the sweep directory")
    else:
        e = top.experiment
        print("experiment hparams: " + ", ".join(
            f"{h.name} ({'discrete ' + str([value_of(v) for v in h.domain_discrete.values]) if h.HasField('domain_discrete') else f'[{h.domain_interval.min_value:g}, {h.domain_interval.max_value:g}]'})"
            for h in e.hparam_infos))
        print("experiment metrics: " + ", ".join(m.name.tag for m in e.metric_infos))
        metric_tag = e.metric_infos[0].name.tag
    ends = {e["trial"]: e for e in lines(os.path.join(sweep_dir, "journal.jsonl")) if e.get("event") == "end"}
    print(f"\n{'trial':>5}  {'journal status':<15} {'session status':<15} {'journal value':>13} {'tb value':>10}  hparams")
    for name in sorted(os.listdir(os.path.join(sweep_dir, "trials"))):
        ea = accumulator(os.path.join(sweep_dir, "trials", name))
        start = plugin_data(ea, "_hparams_/session_start_info")
        end = plugin_data(ea, "_hparams_/session_end_info")
        scalars = ea.Scalars(metric_tag) if top and metric_tag in ea.Tags()["scalars"] else []
        tb_value = scalars[-1].value if scalars else None
        j = ends.get(int(name), {})
        status = STATUS[end.session_end_info.status] if end else "-"
        hp = {k: value_of(v) for k, v in start.session_start_info.hparams.items()} if start else {}
        print(f"{name:>5}  {j.get('status', '-'):<15} {status:<15} {str(j.get('value')):>13} {str(tb_value):>10}  {hp}")
        expected = {"completed": "SUCCESS", "stopped": "SUCCESS", "failed": "FAILURE", "timeout": "FAILURE"}
        if j and expected.get(j["status"]) != status:
            problems.append(f"trial {name}: journal {j['status']}, session {status}")
        if j.get("value") is not None and (tb_value is None or not close(j["value"], tb_value)):
            problems.append(f"trial {name}: journal value {j.get('value')}, TensorBoard {tb_value}")
    if serve:
        ask_hparams_plugin(sweep_dir)


def ask_hparams_plugin(logdir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--port", str(port),
                           "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def post(route, body):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/data/plugin/hparams/{route}",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            return json.loads(urllib.request.urlopen(req, timeout=30).read())
        for _ in range(60):  # TensorBoard loads the logdir in the background
            time.sleep(1)
            try:
                groups = post("session_groups", {"experimentName": "", "startIndex": 0, "sliceSize": 100,
                                                  "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS",
                                                                      "STATUS_FAILURE", "STATUS_RUNNING"]})
                if groups.get("sessionGroups"):
                    break
            except Exception:  # not up yet
                continue
        experiment = post("experiment", {"experimentName": ""})
        print("\nHParams plugin (tensorboard --logdir): hparams",
              [h["name"] for h in experiment.get("hparamInfos", [])],
              "metrics", [m["name"]["tag"] for m in experiment.get("metricInfos", [])])
        for g in groups.get("sessionGroups", []):
            print(f"  {g['name']}: {g.get('hparams')} -> "
                  f"{[(m['name']['tag'], m.get('value')) for m in g.get('metricValues', [])]} "
                  f"{[s.get('status') for s in g.get('sessions', [])]}")
        if not groups.get("sessionGroups"):
            problems.append("the HParams plugin lists no session groups")
    finally:
        tb.terminate()
        tb.wait()


def main(argv):
    if len(argv) < 2 or argv[0] not in ("train", "sweep"):
        sys.exit(__doc__)
    if argv[0] == "train":
        check_train(argv[1])
    else:
        check_sweep(argv[1], "--serve" in argv)
    print("\n" + ("OK: TensorBoard reads what metrics.jsonl / the journal say" if not problems
                  else "PROBLEMS:\n  " + "\n  ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
