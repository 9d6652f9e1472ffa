#!/usr/bin/python3
"""The PyTorch DDP peer of lockstep's main job, for time-to-accuracy runs.

A strong, ordinary PyTorch recipe on the same machine, measured the same way
as `lockstep-fashion-mnist --target-accuracy A`:

  torch.nn.parallel.DistributedDataParallel, gloo, WORLD processes x THREADS
  intra-op threads (default 2 x 1, each pinned to its own core);
  the BN CNN of examples/common/fashion_cnn.h (conv3x3(16)-BN-ReLU-pool,
  conv3x3(32)-BN-ReLU-pool, linear);
  Adam, lr 1e-3 x world, linear warm-up from 1e-3 over 1/4 epoch, constant
  after; batch 128 per worker; DistributedSampler-style reshuffle per epoch;
  the data set in memory as normalised float tensors (no DataLoader workers:
  batches are an index_select, as in lockstep's main job).

Every --eval-every of an epoch it evaluates the full test set (each rank a
slice, counts summed with all_reduce) and stops at the first evaluation >=
--target-accuracy. Training time excludes evaluation; wall time runs from
the start of rank 0's process. Rank 0 prints

  time to target 0.9: T s training, W s wall, E epochs

and, with --metrics FILE, appends one JSON line with time_to_target_s,
wall_to_target_s, epochs_to_target (null when the target was missed).

glibc heap trimming costs LibTorch a large share of a small step: run it with
MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_ raised (bench/time_to_accuracy.sh
does). Debian package: python3-torch (scripts/setup.sh installs it).

  /usr/bin/python3 bench/peer/ddp_fashion_mnist.py --target-accuracy 0.9
"""
import argparse
import gzip
import json
import math
import os
import socket
import sys
import time

PROCESS_START = time.monotonic()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training pixels in [0, 1]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world", type=int, default=2, help="processes")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--batch-size", type=int, default=128, help="per worker")
    p.add_argument("--lr", type=float, default=1e-3, help="one worker's; scaled x world")
    p.add_argument("--warmup-epochs", type=float, default=0.25)
    p.add_argument("--epochs", type=int, default=20, help="upper bound")
    p.add_argument("--target-accuracy", type=float, default=0.9)
    p.add_argument("--eval-every", type=float, default=0.25, help="fraction of an epoch")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--metrics", default="", help="append one JSON line to FILE")
    p.add_argument("--no-pin", action="store_true", help="do not bind rank r to core r")
    a = p.parse_args(argv)
    for name in ("world", "threads", "batch_size", "epochs"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    if not 0 < a.target_accuracy <= 1:
        p.error("--target-accuracy must be in (0, 1]")
    if not 0 < a.eval_every <= 1:
        p.error("--eval-every must be in (0, 1]")
    return a


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_split(folder, split):
    def find(kind):
        for name in (f"{split}-{kind}-idx{3 if kind == 'images' else 1}-ubyte.gz",
                     f"{split}-{kind}-idx{3 if kind == 'images' else 1}-ubyte"):
            if os.path.exists(os.path.join(folder, name)):
                return os.path.join(folder, name)
        sys.exit(f"ddp_fashion_mnist: no {split} {kind} in {folder} "
                 "(apt install dataset-fashion-mnist, or pass --data)")
    images = torch.from_numpy(read_idx(find("images")).copy()).float().div_(255)
    images = images.sub_(MEAN).div_(STD).unsqueeze(1).contiguous()
    labels = torch.from_numpy(read_idx(find("labels")).astype(np.int64))
    return images, labels


class FashionCnn(nn.Module):
    def __init__(self, c1=16, c2=32):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c2)
        self.fc = nn.Linear(c2 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


def rank_indices(n, rank, world, seed, epoch):
    """DistributedSampler's partition: a shuffled order padded to a multiple of world."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    order = torch.randperm(n, generator=g)
    per_rank = math.ceil(n / world)
    order = torch.cat([order, order[:per_rank * world - n]])
    return order[rank * per_rank:(rank + 1) * per_rank]


@torch.no_grad()
def evaluate(model, images, labels, rank, world):
    model.eval()
    n = labels.numel()
    begin, end = n * rank // world, n * (rank + 1) // world
    correct = 0
    for i in range(begin, end, 1000):
        j = min(i + 1000, end)
        correct += (model(images[i:j]).argmax(1) == labels[i:j]).sum().item()
    model.train()
    counts = torch.tensor([correct, end - begin], dtype=torch.float64)
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def worker(rank, a, port, start):
    torch.set_num_threads(a.threads)
    if not a.no_pin and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        per = max(1, len(cores) // a.world)
        os.sched_setaffinity(0, cores[rank * per:(rank + 1) * per] or cores)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.world)
    train_x, train_y = load_split(a.data, "train")
    test_x, test_y = load_split(a.data, "t10k")
    torch.manual_seed(a.seed)
    model = nn.parallel.DistributedDataParallel(FashionCnn())
    peak = a.lr * a.world
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    n = train_y.numel()
    steps_per_epoch = math.ceil(math.ceil(n / a.world) / a.batch_size)
    warmup_steps = a.warmup_epochs * steps_per_epoch
    # Evaluate at k * eval_every of each epoch (rounded to a step) and at its end.
    marks = {min(steps_per_epoch, max(1, round(k * a.eval_every * steps_per_epoch)))
             for k in range(1, math.ceil(1 / a.eval_every) + 1)} | {steps_per_epoch}
    train_s, step, result = 0.0, 0, None
    if rank == 0:
        print(f"ddp_fashion_mnist: {a.world} x {a.threads} thread(s), batch {a.batch_size} "
              f"per worker, Adam {peak:g}, target {a.target_accuracy}", file=sys.stderr)
    for epoch in range(a.epochs):
        order = rank_indices(n, rank, a.world, a.seed, epoch)
        tick = time.monotonic()
        for b in range(steps_per_epoch):
            lr = peak if step >= warmup_steps else a.lr + (peak - a.lr) * step / warmup_steps
            for group in opt.param_groups:
                group["lr"] = lr
            index = order[b * a.batch_size:(b + 1) * a.batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(train_x.index_select(0, index)),
                            train_y.index_select(0, index)).backward()
            opt.step()
            step += 1
            if b + 1 not in marks:
                continue
            train_s += time.monotonic() - tick
            accuracy = evaluate(model, test_x, test_y, rank, a.world)
            epochs = step / steps_per_epoch
            if rank == 0:
                print(f"  {epochs:.2f} epochs: test acc {100 * accuracy:.2f}% | "
                      f"{train_s:.1f} s training", file=sys.stderr)
            if accuracy >= a.target_accuracy:
                result = (train_s, time.monotonic() - start, epochs)
                break
            tick = time.monotonic()
        if result:
            break
    if rank == 0:
        report(a, result)
    dist.barrier()
    dist.destroy_process_group()


def report(a, result):
    if result:
        print(f"time to target {a.target_accuracy:g}: {result[0]:.2f} s training, "
              f"{result[1]:.2f} s wall, {result[2]:.2f} epochs")
    else:
        print(f"time to target {a.target_accuracy:g}: not reached in {a.epochs} epochs")
    if a.metrics:
        line = {"job": "pytorch-ddp", "target_accuracy": a.target_accuracy,
                "time_to_target_s": result[0] if result else None,
                "wall_to_target_s": result[1] if result else None,
                "epochs_to_target": result[2] if result else None, "seed": a.seed,
                "workers": a.world, "threads": a.threads}
        with open(a.metrics, "a") as f:
            f.write(json.dumps(line) + "\n")


def main():
    a = parse_args(sys.argv[1:])
    with socket.socket() as s:  # a free port for the gloo rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Children measure wall time from this process's start (same clock).
    mp.start_processes(worker, args=(a, port, PROCESS_START), nprocs=a.world,
                       start_method="fork")


if __name__ == "__main__":
    main()
