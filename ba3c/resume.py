"""Resuming a run: rank 0 reads the newest valid checkpoint into the learner and says what the resume changes.

Every rank then takes the run state by broadcast (`RunState.broadcast`, in `ba3c.runner`); what an algorithm's
actor kept beside the checkpoint (a saved replay memory) it restores itself (`Actor.restore`).
"""
from __future__ import annotations

import sys
from typing import Any

from ba3c import checkpoint as ckpt
from ba3c.config import IMPLIED_BY_OLDER_CONFIGS, Config
from ba3c.state import RunState

# A resume that changes one of these drops the collapse guard's lr cut (a learning rate chosen anew replaces it)
LR_OPTIONS = ("lr", "lr_scaling", "lr_ref_batch")


def config_changes(old: dict[str, dict[str, Any]], new: Config) -> dict[str, list[Any]]:
    """Option -> [old value, new value] for every option a resume changes (the resume path aside)."""
    before = {**IMPLIED_BY_OLDER_CONFIGS, **{k: v for group in old.values() for k, v in group.items()}}
    after = {k: v for group in new.to_dict().values() for k, v in group.items()}
    return {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v and k != "resume"}


def restore(ckpt_dir: str, learner: Any, cfg: Config, world_size: int) -> tuple[RunState, dict[str, list[Any]]]:
    """Rank 0, on resume: the newest valid checkpoint into `learner` (ba3c.learner.Learner); returns its run
    state and the config changes (a fresh state when there is no valid checkpoint)."""
    c = ckpt.load_latest(ckpt_dir)
    if c is None:
        print(f"ba3c: no valid checkpoint in {ckpt_dir}; starting from scratch", file=sys.stderr)
        return RunState(), {}
    learner.load_state_arrays(c.arrays)
    changes = config_changes(c.meta.get("config", {}), cfg)
    if changes:
        print(f"ba3c: resume changes {', '.join(f'{k}: {a!r} -> {b!r}' for k, (a, b) in changes.items())}")
    if "cpu_s" not in c.meta:
        print("ba3c: this checkpoint predates CPU accounting; cpu_s counts from this resume", file=sys.stderr)
    state = RunState.from_meta(c.meta)
    if state.lr_scale != 1.0 and any(k in changes for k in LR_OPTIONS):
        print(f"ba3c: the learning rate changes on resume: the collapse guard's lr cut (x{state.lr_scale:g}) "
              f"is dropped")
        state.lr_scale = 1.0
    print(f"ba3c: resuming from {c.path} (update {state.updates:,}, {state.frames:,} frames; "
          f"trained on {c.meta.get('world_size')} ranks, now {world_size})")
    return state, changes
