"""The batch and learning-rate arithmetic: how many ranks' data one update holds, the global batch and its
limit, and the learning rate each rule (--lr-scaling) gives it. The one place a new lr rule goes.
"""
from __future__ import annotations

import math
from typing import Protocol

LR_SCALINGS = ("none", "linear", "sqrt")
MAX_GLOBAL_BATCH = 4096  # twice the paper's largest; beyond it Adam needs retuning we have not done


class _Learn(Protocol):
    @property
    def train_batch(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def lr_scaling(self) -> str: ...
    @property
    def lr_ref_batch(self) -> int: ...


class _Run(Protocol):
    @property
    def rehearse_ranks(self) -> int: ...


class Sizes(Protocol):
    """What the arithmetic reads of a configuration (`ba3c.config.Config` is one; no import of it here: the
    config's validation uses this module)."""

    @property
    def learn(self) -> _Learn: ...
    @property
    def run(self) -> _Run: ...


def data_ranks(cfg: Sizes, world_size: int) -> int:
    """The ranks whose data one update holds: the real ones, times --rehearse-ranks."""
    return world_size * cfg.run.rehearse_ranks


def noise_sub_batch(cfg: Sizes) -> int:
    """--noise-scale-every's small batch: one rehearsed rank's batch, or a quarter of the rank's batch."""
    return cfg.learn.train_batch if cfg.run.rehearse_ranks > 1 else cfg.learn.train_batch // 4


def global_batch(cfg: Sizes, world_size: int) -> int:
    return cfg.learn.train_batch * data_ranks(cfg, world_size)


def scaled_lr(cfg: Sizes, world_size: int) -> float:
    """Learning rate for the global batch (rehearsed ranks included), by the rule in `lr_scaling`."""
    ratio = global_batch(cfg, world_size) / cfg.learn.lr_ref_batch
    rule = cfg.learn.lr_scaling
    if rule == "linear":
        return cfg.learn.lr * ratio
    if rule == "sqrt":
        return cfg.learn.lr * math.sqrt(ratio)
    return cfg.learn.lr
