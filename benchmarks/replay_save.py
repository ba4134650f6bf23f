"""What `--replay-save end` costs against the warm-up it replaces, on this machine's disk.

    python -m benchmarks.replay_save [--slots 1000000] [--dir runs/replay-save-bench] [--agent-steps-per-s 1600]

Fills a Gorila replay memory of --slots Pong-shaped transitions (8 streams of 84x84 uint8 frames; random
frames: the disk sees the same bytes either way), saves it with the trainer's own `ba3c.algos.dqn.save_replay`,
drops the page cache where it may (root), loads it into a new replay with `load_replay`, and removes it.
Prints and writes OUT/replay_save.json and OUT/replay_save.png: seconds to save and to load (measured) beside
the --learning-starts warm-up a resume without it plays (modelled: 80,000 agent steps at --agent-steps-per-s,
the warm-up's rate here, where no update runs: ~1,600 on Pong; docs/gorila.md). Needs about twice --slots x
7 KB of memory and once on --dir's disk.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from measure import harness

LEARNING_STARTS = 80_000  # the trainer's --learning-starts default (CleanRL dqn_atari)
ENVS = 8  # Gorila mode's --num-envs default


def fill(slots: int, seed: int = 0):
    from ba3c.algos.replay import Replay

    replay = Replay(slots, ENVS, (4, 84, 84), np.uint8, clip_rewards=True)
    frames = np.random.default_rng(seed).integers(0, 255, (64, 4, 84, 84), dtype=np.uint8)
    ids, zeros = np.arange(ENVS), np.zeros(ENVS, bool)
    for t in range(slots // ENVS + 1):
        replay.add(ids, frames[(t * ENVS + ids) % 64], np.zeros(ENVS, np.float32), zeros, zeros, None,
                   np.zeros(ENVS, np.int32), t)
    return replay


def drop_page_cache() -> bool:
    """So that the load reads the disk, not memory; needs root (False where it could not)."""
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def measure(slots: int, directory: str) -> dict:
    from ba3c.algos import dqn as gorila
    from ba3c.algos.replay import Replay

    replay = fill(slots)
    held = replay.transitions()
    t0 = time.monotonic()
    line = gorila.save_replay(replay, directory, 0, updates=0)
    save_s = time.monotonic() - t0
    if "saved" not in line or "not saved" in line:
        raise SystemExit(f"replay_save: {line}")
    shard = gorila.replay_dir(directory, 0)
    nbytes = sum(os.path.getsize(os.path.join(shard, f)) for f in os.listdir(shard))
    del replay
    dropped = drop_page_cache()
    fresh = Replay(slots, ENVS, (4, 84, 84), np.uint8, clip_rewards=True)
    t0 = time.monotonic()
    loaded, _ = gorila.load_replay(fresh, directory, 0)
    load_s = time.monotonic() - t0
    if loaded != held:
        raise SystemExit(f"replay_save: loaded {loaded} transitions, saved {held}")
    return {"slots": slots, "transitions": held, "bytes": nbytes, "save_s": save_s, "load_s": load_s,
            "page_cache_dropped": dropped}


def plot(result: dict, path: str) -> None:
    plt = harness.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = ["save (measured)", "load (measured)", f"warm-up {LEARNING_STARTS:,} steps\n(MODELLED)"]
    values = [result["save_s"], result["load_s"], result["warmup_s_modelled"]]
    ax.barh(names, values, color=["C0", "C0", "grey"])
    ax.set_xscale("log")
    ax.set_xlabel("seconds per resume (log)")
    ax.set_title(f"--replay-save end: {result['bytes'] / 1e9:.2f} GB per rank, {result['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slots", type=int, default=1_000_000, help="replay size measured (the trainer's default)")
    p.add_argument("--dir", default=os.path.join(harness.ROOT, "runs", "replay-save-bench"),
                   help="where the shard is written (removed after)")
    p.add_argument("--agent-steps-per-s", type=float, default=1600.0, help="agent steps/s of the warm-up (no updates)")
    p.add_argument("--out", default=os.path.join(harness.RESULTS, "replay_save"))
    args = p.parse_args(argv)
    if args.slots < 8 * ENVS or args.agent_steps_per_s <= 0:
        print(f"replay_save: --slots must be at least {8 * ENVS} and --agent-steps-per-s positive", file=sys.stderr)
        return 2
    if os.path.exists(args.dir):
        print(f"replay_save: {args.dir} exists; give an empty --dir", file=sys.stderr)
        return 2
    try:
        result = measure(args.slots, args.dir)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    result.update(date=harness.now(), machine=harness.machine(), learning_starts=LEARNING_STARTS,
                  agent_steps_per_s=args.agent_steps_per_s,
                  warmup_s_modelled=LEARNING_STARTS / args.agent_steps_per_s)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "replay_save.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    plot(result, os.path.join(args.out, "replay_save.png"))
    print(f"replay_save: {result['bytes'] / 1e9:.2f} GB saved in {result['save_s']:.1f} s, loaded in "
          f"{result['load_s']:.1f} s (page cache dropped: {result['page_cache_dropped']}); the warm-up it replaces: "
          f"{result['warmup_s_modelled'] / 60:.1f} min (modelled) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
