"""Memory a configuration needs, against the memory this machine has; checked before anything starts.

The per-item figures were measured on the 2-core development machine (TF 2.21 CPU, ale-py 0.12.1,
November 2026; peak resident memory deltas, see the README): one ALE emulator with its buffers
1.42-1.87 MB (1.5 used); Python + TensorFlow + a model about 580 MB (700 used); a train step's
activations and gradients about 0.34-0.41 MB per sample for the Nature CNN at batch 512-2048
(0.5 used) and 2.6-3.7 MB for the paper's network, whose first convolutions run at full
resolution (4 used). They are estimates: the check refuses only what clearly cannot fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ba3c.algos.base import MemoryCost
from ba3c.config import Config, ConfigError

MB = 1 << 20
EMULATOR_BYTES = {"atari": int(1.5 * MB), "gym": int(0.1 * MB)}  # per environment, besides its frames
BASE_BYTES = 700 * MB  # interpreter, TensorFlow, model and optimizer state
TRAIN_BYTES_PER_SAMPLE = {"nature": int(0.5 * MB), "paper": 4 * MB, "mlp": 16 * 1024}
USABLE_FRACTION = 0.9  # of the available memory; the rest is for the OS and estimation error


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank needs, by what needs them."""

    emulators: int
    frames: int   # observations held per environment: n-step segment, predictor and experience buffers
    batches: int  # train batches queued, being assembled and being trained, plus their activations
    base: int
    algo: int = 0  # what the algorithm keeps besides (a replay memory, full: ba3c.algos.base.MemoryCost)

    @property
    def total(self) -> int:
        return self.emulators + self.frames + self.batches + self.base + self.algo


def estimate_memory(cfg: Config, kind: str, obs_bytes: int, model: str,
                    extra: MemoryCost | None = None) -> MemoryEstimate:
    """extra: what the algorithm keeps per rank besides (`Algorithm.memory`: a replay memory counted full)."""
    s, l, r = cfg.sim, cfg.learn, cfg.run
    k = r.rehearse_ranks  # a rehearsal holds K ranks' simulators and batches in one process
    num_envs, train_batch, predict_batch = s.num_envs * k, l.train_batch * k, s.predict_batch * k
    # each environment's segment holds up to n_step + 1 observations; the simulator keeps ~2 more
    frames = num_envs * (l.n_step + 3) * obs_bytes
    in_flight = (r.queue_batches + 2) * train_batch * obs_bytes
    activations = (train_batch + predict_batch) * TRAIN_BYTES_PER_SAMPLE[model]
    return MemoryEstimate(num_envs * EMULATOR_BYTES[kind], frames, in_flight + activations, BASE_BYTES,
                          extra.bytes if extra is not None else 0)


def available_memory() -> int:
    """Bytes this process may still use: MemAvailable, or a smaller cgroup limit (containers, SLURM)."""
    avail = _meminfo_available()
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as fh:
                limit = fh.read().strip()
            with open(usage_file) as fh:
                used = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            avail = min(avail, max(0, int(limit) - used))
    return avail


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: do not refuse


def check_memory(cfg: Config, kind: str, obs_bytes: int, model: str, ranks_here: int, available: int,
                 extra: MemoryCost | None = None) -> MemoryEstimate:
    """Raise ConfigError naming what the request needs, what there is, and what would fit."""
    est = estimate_memory(cfg, kind, obs_bytes, model, extra)
    usable = int(available * USABLE_FRACTION)
    if est.total * ranks_here <= usable:
        return est
    who = f" x {ranks_here} ranks on this host" if ranks_here > 1 else ""
    if extra is not None and extra.unit_bytes and est.algo > est.total - est.algo:
        # the algorithm's own memory (a replay) is most of it: name the size of its option that fits
        rest = est.total - est.algo
        fits = max(0, (usable // ranks_here - rest) // extra.unit_bytes)
        fix = (f"use at most {extra.option} {fits:,}" if fits >= extra.least else
               f"run fewer ranks per host (the rest of a rank leaves no room for {extra.what})")
        raise ConfigError(f"{extra.option} {extra.value:,} needs about {_size(est.algo)} per rank{who}, "
                          f"besides {_size(rest)} for the rest of each rank; this machine has {_size(available)} "
                          f"available; {fix}")
    need = (f"needs about {_size(est.total * ranks_here)} ({_size(est.emulators)} emulators, "
            f"{_size(est.frames)} frames, {_size(est.batches)} batches, {_size(est.base)} TensorFlow per rank{who})")
    rehearse = f" x --rehearse-ranks {cfg.run.rehearse_ranks}" if cfg.run.rehearse_ranks > 1 else ""
    raise ConfigError(f"--num-envs {cfg.sim.num_envs} with --train-batch {cfg.learn.train_batch} and --queue-batches "
                      f"{cfg.run.queue_batches}{rehearse} {need}; this machine has {_size(available)} available; "
                      f"{_what_fits(cfg, est, usable // ranks_here)}")


def _what_fits(cfg: Config, est: MemoryEstimate, per_rank: int) -> str:
    """The largest change of the dominant term that fits (the other sizes kept)."""
    if est.emulators + est.frames >= est.batches:
        per_env = (est.emulators + est.frames) / (cfg.sim.num_envs * cfg.run.rehearse_ranks)
        envs = math.floor((per_rank - est.batches - est.base) / per_env) // cfg.run.rehearse_ranks
        if envs >= cfg.sim.predict_batch:
            return f"use at most --num-envs {envs}"
    elif cfg.run.queue_batches > 8:
        return "use a small --queue-batches (default 2: it also bounds the policy lag)"
    else:
        k = cfg.run.rehearse_ranks
        per_sample = est.batches / (k * cfg.learn.train_batch * (cfg.run.queue_batches + 2) + k * cfg.sim.predict_batch)
        room = per_rank - est.emulators - est.frames - est.base
        batch = math.floor(room / per_sample / (cfg.run.queue_batches + 2)) if room > 0 else 0
        if batch >= 1:
            return f"use at most --train-batch {batch // k} (or fewer ranks per host)"
    return "lower --num-envs, --train-batch or --queue-batches, or use fewer ranks per host"


def _size(b: float) -> str:
    return f"{b / (1 << 30):.1f} GB" if b >= 1 << 30 else f"{b / MB:.0f} MB"
