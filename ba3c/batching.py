"""The batch and learning-rate arithmetic: how many ranks' data one update holds, the global batch and its
limit, and the learning rate each rule (--lr-scaling) gives it. The one place a new lr rule goes.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ba3c.config import Config

LR_SCALINGS = ("none", "linear", "sqrt")
MAX_GLOBAL_BATCH = 4096  # twice the paper's largest; beyond it Adam needs retuning we have not done


def data_ranks(cfg: Config, world_size: int) -> int:
    """The ranks whose data one update holds: the real ones, times --rehearse-ranks."""
    return world_size * cfg.run.rehearse_ranks


def noise_sub_batch(cfg: Config) -> int:
    """--noise-scale-every's small batch: one rehearsed rank's batch, or a quarter of the rank's batch."""
    return cfg.learn.train_batch if cfg.run.rehearse_ranks > 1 else cfg.learn.train_batch // 4


def global_batch(cfg: Config, world_size: int) -> int:
    return cfg.learn.train_batch * data_ranks(cfg, world_size)


def check_world(cfg: Config, world_size: int) -> None:
    """Checks that need the number of ranks (run before any expensive start-up)."""
    from ba3c.config import ConfigError

    gb, ranks = global_batch(cfg, world_size), data_ranks(cfg, world_size)
    if gb > MAX_GLOBAL_BATCH:
        rehearsal = f" x --rehearse-ranks {cfg.run.rehearse_ranks}" if cfg.run.rehearse_ranks > 1 else ""
        what = f"{world_size} ranks{rehearsal}"
        # only fixes that can be applied: each of them is at least 1
        fixes = [f"lower --train-batch to at most {MAX_GLOBAL_BATCH // ranks}"] if ranks <= MAX_GLOBAL_BATCH else []
        if cfg.run.rehearse_ranks > 1 and world_size * cfg.learn.train_batch <= MAX_GLOBAL_BATCH:
            most = MAX_GLOBAL_BATCH // (world_size * cfg.learn.train_batch)
            fixes.append(f"lower --rehearse-ranks to at most {most}")
        if not fixes:
            fixes.append(f"run on at most {MAX_GLOBAL_BATCH // cfg.learn.train_batch} ranks")
        raise ConfigError(f"global batch {cfg.learn.train_batch} x {what} = {gb} exceeds {MAX_GLOBAL_BATCH}; "
                          f"{' or '.join(fixes)}")


def scaled_lr(cfg: Config, world_size: int) -> float:
    """Learning rate for the global batch (rehearsed ranks included), by the rule in `lr_scaling`."""
    ratio = global_batch(cfg, world_size) / cfg.learn.lr_ref_batch
    rule = cfg.learn.lr_scaling
    if rule == "linear":
        return cfg.learn.lr * ratio
    if rule == "sqrt":
        return cfg.learn.lr * math.sqrt(ratio)
    return cfg.learn.lr
