#!/usr/bin/env python3
"""PyTorch DDP example driven only by gangway's launch contract.

gangway starts one process per rank with torchrun's variables (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
CUDA_VISIBLE_DEVICES) and its own (GANGWAY_NODE_ADDR,
GANGWAY_CHECKPOINT_DIR, GANGWAY_RESUME_FROM, GANGWAY_PROGRESS_FILE, ...).
This script trains a small MLP on a seeded synthetic classification set
with DistributedDataParallel (gloo on CPU, nccl on GPUs), checkpoints into
$GANGWAY_CHECKPOINT_DIR/<step>/ committed by a COMMITTED marker written
last, resumes from $GANGWAY_RESUME_FROM, and appends JSON progress lines.

The batch of step s depends only on --seed, --batch and s, and the model
trains in float64 on one thread per rank, so on CPU a run killed and
resumed from a checkpoint ends with the same loss as one never killed.

Works with Debian's python3-torch (1.13); needs nothing else.
"""

import argparse
import datetime
import fcntl
import json
import os
import re
import signal
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

INPUT_DIM = 16
NUM_CLASSES = 4
DATASET_SIZE = 4096
COMMITTED = "COMMITTED"
STATE_FILE = "state.pt"


def usage_error(msg):
    """Bad flags or launch environment: exit 2, like argparse."""
    print(f"train.py: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def parse_duration(text):
    """Seconds from "0.05", "50ms", "2s", "1m" (Go-style units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (examples: 0.05, 50ms, 2s)")
    scale = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {v}")
    return v


def non_negative_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=positive_int, default=300,
                   help="total training steps; a resumed run stops at the same step")
    p.add_argument("--batch", type=positive_int, default=256,
                   help="global batch (examples per step over all ranks)")
    p.add_argument("--hidden", type=positive_int, default=64, help="hidden units")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the data set, initial weights and batch order")
    p.add_argument("--checkpoint-every", type=non_negative_int, default=20,
                   help="checkpoint every K steps (0: only at the end and on SIGUSR1)")
    p.add_argument("--log-every", type=positive_int, default=10,
                   help="print the loss every K steps (rank 0)")
    p.add_argument("--step-delay", type=parse_duration, default=0.0,
                   help="sleep after every step, e.g. 50ms (for demos)")
    p.add_argument("--timeout", type=parse_duration, default=60.0,
                   help="rendezvous and collective timeout, e.g. 60s")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: cuda with nccl when available, else cpu with gloo")
    args = p.parse_args(argv)
    if not args.lr > 0:
        p.error(f"--lr must be positive, got {args.lr}")
    if not 0 <= args.momentum < 1:
        p.error(f"--momentum must be in [0, 1), got {args.momentum}")
    return args


class Launch:
    """The launch contract, read from the environment."""

    def __init__(self, env):
        def integer(name, default, minimum):
            raw = env.get(name, "")
            if raw == "":
                return default
            try:
                v = int(raw)
            except ValueError:
                v = None
            if v is None or v < minimum:
                usage_error(f"environment {name}={raw!r}: want an integer >= {minimum}")
            return v

        self.rank = integer("RANK", 0, 0)
        self.world_size = integer("WORLD_SIZE", 1, 1)
        self.local_rank = integer("LOCAL_RANK", 0, 0)
        self.local_world_size = integer("LOCAL_WORLD_SIZE", 1, 1)
        self.attempt = integer("GANGWAY_ATTEMPT", 1, 1)
        if self.rank >= self.world_size:
            usage_error(f"environment RANK={self.rank} is not below WORLD_SIZE={self.world_size}")
        self.master_addr = env.get("MASTER_ADDR", "")
        self.master_port = env.get("MASTER_PORT", "")
        if self.world_size > 1 and (not self.master_addr or not self.master_port):
            usage_error(f"MASTER_ADDR and MASTER_PORT are required when WORLD_SIZE={self.world_size} > 1")
        self.node_addr = env.get("GANGWAY_NODE_ADDR", "")
        self.job_id = env.get("GANGWAY_JOB_ID", "")
        self.checkpoint_dir = env.get("GANGWAY_CHECKPOINT_DIR", "")
        self.resume_from = env.get("GANGWAY_RESUME_FROM", "")
        self.progress_file = env.get("GANGWAY_PROGRESS_FILE", "")


def interface_with_address(addr):
    """Name of the network interface that holds IPv4 address addr, or None."""
    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                got = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)[20:24])
            except OSError:
                continue
            if got == addr:
                return name
    return None


def init_distributed(launch, args):
    """Joins the process group through MASTER_ADDR:MASTER_PORT (env://)."""
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        # One GPU per rank: gangway usually narrows CUDA_VISIBLE_DEVICES to
        # the rank's own GPUs (then use the first); when a whole node's GPUs
        # are visible, pick by LOCAL_RANK as torchrun jobs do.
        n = torch.cuda.device_count()
        index = launch.local_rank if n >= launch.local_world_size and launch.local_rank < n else 0
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    # Gloo binds to the address of the machine's hostname unless told
    # otherwise; point it at the interface gangway says other ranks reach.
    if backend == "gloo" and launch.node_addr and "GLOO_SOCKET_IFNAME" not in os.environ:
        ifname = interface_with_address(launch.node_addr)
        if ifname:
            os.environ["GLOO_SOCKET_IFNAME"] = ifname
    if launch.world_size == 1 and not launch.master_port:
        # Run by hand: a private store on a free loopback port.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            launch.master_addr, launch.master_port = "127.0.0.1", str(s.getsockname()[1])
    os.environ["MASTER_ADDR"] = launch.master_addr
    os.environ["MASTER_PORT"] = launch.master_port
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=launch.rank,
        world_size=launch.world_size,
        timeout=datetime.timedelta(seconds=args.timeout),
    )
    return device, backend


def make_dataset(seed):
    """A fixed synthetic set: Gaussian inputs labelled by a random linear
    teacher plus noise, so the loss cannot reach zero."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(NUM_CLASSES, INPUT_DIM, generator=g, dtype=torch.float64)
    x = torch.randn(DATASET_SIZE, INPUT_DIM, generator=g, dtype=torch.float64)
    logits = x @ teacher.T + torch.randn(DATASET_SIZE, NUM_CLASSES, generator=g, dtype=torch.float64)
    return x, logits.argmax(dim=1)


class BatchOrder:
    """Example indices of a step's global batch: each pass over the data
    set uses a permutation drawn from the seed and the epoch number, so the
    batch of a step depends only on the seed, the batch size and the step
    (DistributedSampler's idea, indexed by step instead of by epoch)."""

    def __init__(self, seed):
        self.seed = seed
        self.perms = {}

    def perm(self, epoch):
        if epoch not in self.perms:
            self.perms = {epoch: torch.randperm(
                DATASET_SIZE, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + epoch))}
        return self.perms[epoch]

    def shard(self, step, batch, rank, world):
        """Indices of rank's contiguous share of step's global batch."""
        lo, hi = batch * rank // world, batch * (rank + 1) // world
        out = []
        for j in range(lo, hi):
            pos = (step - 1) * batch + j
            out.append(int(self.perm(pos // DATASET_SIZE)[pos % DATASET_SIZE]))
        return torch.tensor(out, dtype=torch.long)


def make_model(hidden, seed):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(INPUT_DIM, hidden, dtype=torch.float64),
        nn.Tanh(),
        nn.Linear(hidden, NUM_CLASSES, dtype=torch.float64),
    )


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_sync(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(root, step, payload, meta):
    """Writes root/<step>/ and commits it with COMMITTED, written last after
    the data is fsynced. An uncommitted directory of the same step (from a
    writer that died) is replaced; a committed one is left alone."""
    d = os.path.join(root, str(step))
    if os.path.exists(os.path.join(d, COMMITTED)):
        return d, True
    if os.path.isdir(d):
        for name in os.listdir(d):
            os.remove(os.path.join(d, name))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, STATE_FILE), "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    write_file_sync(os.path.join(d, "meta.json"), (json.dumps(meta, indent=2) + "\n").encode())
    fsync_dir(d)
    write_file_sync(os.path.join(d, COMMITTED), b"")
    fsync_dir(d)
    fsync_dir(root)
    return d, False


def load_checkpoint(path):
    if not os.path.exists(os.path.join(path, COMMITTED)):
        raise SystemExit(
            f"train.py: GANGWAY_RESUME_FROM={path} has no {COMMITTED} marker: "
            "it was never committed and must not be resumed from")
    return torch.load(os.path.join(path, STATE_FILE), map_location="cpu")


def main(argv):
    args = parse_args(argv)
    launch = Launch(os.environ)
    if args.batch < launch.world_size:
        usage_error(f"--batch {args.batch} is smaller than WORLD_SIZE={launch.world_size}")
    leader = launch.rank == 0

    def say(msg):
        if leader:
            print(msg, flush=True)

    # Reproducibility: float64, one thread, deterministic kernels.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)

    # SIGUSR1: checkpoint at the next step boundary. SIGTERM keeps its
    # default action, which ends the process at once even inside a
    # collective.
    checkpoint_requested = [False]
    signal.signal(signal.SIGUSR1, lambda *_: checkpoint_requested.__setitem__(0, True))

    device, backend = init_distributed(launch, args)
    model = make_model(args.hidden, args.seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    step, loss_value = 0, float("nan")
    if launch.resume_from:
        ck = load_checkpoint(launch.resume_from)
        if ck["seed"] != args.seed:
            sys.exit(f"train.py: checkpoint {launch.resume_from} was written with --seed {ck['seed']}, this run has --seed {args.seed}")
        if ck["step"] > args.steps:
            sys.exit(f"train.py: checkpoint {launch.resume_from} is at step {ck['step']}, past --steps {args.steps}")
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        step, loss_value = ck["step"], ck["loss"]
        print(f"resumed from step {step} ({launch.resume_from})", flush=True)
    ddp = DDP(model) if device.type == "cpu" else DDP(model, device_ids=[device.index])
    say(f"rank 0 of {launch.world_size}: backend {backend} on {device}; "
        f"{sum(p.numel() for p in model.parameters())} parameters, global batch {args.batch}, "
        f"steps {step + 1}..{args.steps}")
    if leader and not launch.checkpoint_dir:
        say("GANGWAY_CHECKPOINT_DIR is not set: no checkpoints will be written")

    x_all, y_all = make_dataset(args.seed)
    order = BatchOrder(args.seed)
    progress = open(launch.progress_file, "a") if leader and launch.progress_file else None

    def checkpoint():
        if not launch.checkpoint_dir:
            say(f"checkpoint requested at step {step}, but GANGWAY_CHECKPOINT_DIR is not set")
            return
        payload = {"step": step, "loss": loss_value, "seed": args.seed,
                   "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        meta = {"format": "gangway-pytorch-ddp/1", "step": step, "loss": loss_value,
                "world_size": launch.world_size, "job_id": launch.job_id, "attempt": launch.attempt}
        d, already = save_checkpoint(launch.checkpoint_dir, step, payload, meta)
        say(f"checkpoint step {step} {'already ' if already else ''}committed at {d}")

    def write_progress(final):
        if progress is None:
            return
        line = {"step": step, "loss": loss_value, "tokens": step * args.batch}
        if final:
            line["final"] = True
        progress.write(json.dumps(line) + "\n")
        progress.flush()

    resumed_at_end = step == args.steps
    # Each rank's loss is its shard's summed cross-entropy over the global
    # batch size, times WORLD_SIZE because DDP averages gradients over
    # ranks: the averaged gradient is then the global batch's mean gradient
    # however unevenly the batch splits.
    while step < args.steps:
        s = step + 1
        idx = order.shard(s, args.batch, launch.rank, launch.world_size)
        x, y = x_all[idx].to(device), y_all[idx].to(device)
        part = F.cross_entropy(ddp(x), y, reduction="sum") / args.batch
        optimizer.zero_grad(set_to_none=True)
        (part * launch.world_size).backward()
        optimizer.step()
        total = part.detach().clone()
        dist.all_reduce(total)
        step, loss_value = s, total.item()
        last = step == args.steps
        if leader:
            if checkpoint_requested[0]:
                checkpoint_requested[0] = False
                checkpoint()
            elif launch.checkpoint_dir and (last or (args.checkpoint_every and step % args.checkpoint_every == 0)):
                checkpoint()
            write_progress(last)
            if step % args.log_every == 0 or last:
                say(f"step {step}/{args.steps} loss {loss_value:.6f}")
        if args.step_delay > 0 and not last:
            time.sleep(args.step_delay)
    if resumed_at_end:
        write_progress(True)
    say(f"final_loss={loss_value!r}")
    if progress is not None:
        progress.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
