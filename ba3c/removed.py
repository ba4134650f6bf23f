"""The options removed because their experiments measured no gain, and what a saved config that still holds
one means: dropped silently where it named the behaviour that remains, refused for a resume where the run
trained with the removed behaviour (the commit that last had it is named).
"""
from __future__ import annotations

from typing import Any

# Options removed because their experiments measured no gain (docs: batch scaling, learning rate, scaling; the code
# is in git history: REMOVED_IN names, per option, the last commit that has it). A saved config may still hold them.
# The value given here is the behaviour that remains (None: a knob of the removed behaviour, meaningless without
# it): such entries are dropped silently. Any other value means the run trained with the removed behaviour: a resume
# cannot continue it, an evaluation can (the network is the same).
REMOVED_OPTIONS: dict[str, Any] = {"lr_adapt": "none", "kl_target": None, "kl_lr_max": None, "kl_samples": None,
                                   "advantage_norm": "none", "lr_decay": "none", "lr_decay_frames": None,
                                   "exchange": "sync", "optimizer": "adam", "rms_alpha": None}
_KL_GONE, _DECAY_GONE, _OVERLAP_GONE, _RMSPROP_GONE = "7a76fc9bcf21", "3fb9c3a6a7b7", "a8907d52b199", "f36558ad4d36"
REMOVED_IN: dict[str, str] = {"lr_adapt": _KL_GONE, "kl_target": _KL_GONE, "kl_lr_max": _KL_GONE,
                              "kl_samples": _KL_GONE, "advantage_norm": _KL_GONE,
                              "lr_decay": _DECAY_GONE, "lr_decay_frames": _DECAY_GONE, "exchange": _OVERLAP_GONE,
                              "optimizer": _RMSPROP_GONE, "rms_alpha": _RMSPROP_GONE}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _saved_items(data: Any) -> list[tuple[str, Any]]:
    """(option, value) of a saved config, nested by group or flat, in the file's order (a group is a key whose
    value is an object: no option's value is one)."""
    if not isinstance(data, dict):
        return []
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        out += list(value.items()) if isinstance(value, dict) else [(key, value)]
    return out


def removed_behaviours(data: Any) -> list[str]:
    """The removed behaviours (REMOVED_OPTIONS) a saved config trained with, as flags: ['--lr-adapt kl']."""
    return [f"{_flag(k)} {v}" for k, v in _saved_items(data)
            if k in REMOVED_OPTIONS and REMOVED_OPTIONS[k] is not None and v != REMOVED_OPTIONS[k]]


def removed_message(source: str, used: list[str]) -> str:
    """`used`: removed_behaviours' flags ('--lr-adapt kl'); the message names the last commit that has each."""
    commits = sorted({REMOVED_IN[flag.split()[0][2:].replace("-", "_")] for flag in used})
    return (f"{source}: the run trained with {', '.join(used)}, which ba3c no longer has (its experiment measured "
            f"no gain); continue it with git commit {', '.join(commits)}, the last that has it, or start a new run")


def without_removed(data: Any) -> Any:
    """A saved config without the removed options (REMOVED_OPTIONS)."""
    if not isinstance(data, dict):
        return data
    return {key: ({k: v for k, v in value.items() if k not in REMOVED_OPTIONS} if isinstance(value, dict) else value)
            for key, value in data.items() if key not in REMOVED_OPTIONS}
