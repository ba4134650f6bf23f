"""One ALE emulator whose RAM can be read, with observations built as the trainer's AtariVectorEnv builds them.

The diagnosis scripts (`seaquest_lives`, `pong_points`) read game state from RAM after every agent step,
which AtariVectorEnv does not expose. The observations are built here in numpy (frameskip 4, max of the
last two frames, grey, 84x84 by area averaging, 4 stacked, 0-30 no-op frames at the start, FIRE at the
start), so they may differ from the trainer's by a grey level here and there.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

FRAMESKIP, STACK, SIZE, NOOP_MAX = 4, 4, 84, 30


def area_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) weights that average the input cells each output cell covers, by overlap: area
    resampling along one axis (what OpenCV's INTER_AREA does when shrinking)."""
    scale = n_in / n_out
    w = np.zeros((n_out, n_in), np.float64)
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(n_in, int(np.ceil(hi)))):
            w[i, j] = min(hi, j + 1) - max(lo, j)
    return w / scale


class RamAtari:
    """One emulator of `game` (an ale-py ROM id: "pong", "seaquest") without sticky actions."""

    def __init__(self, game: str, seed: int) -> None:
        import ale_py

        self.ale = ale_py.ALEInterface()
        self.ale.setInt("random_seed", seed)
        self.ale.setFloat("repeat_action_probability", 0.0)
        self.ale.setLoggerMode(ale_py.LoggerMode.Error)
        self.ale.loadROM(ale_py.roms.get_rom_path(game))
        self.actions = list(self.ale.getMinimalActionSet())
        self.fire: int | None = self.actions.index(ale_py.Action.FIRE) if ale_py.Action.FIRE in self.actions else None
        h, w = self.ale.getScreenDims()
        self._rows, self._cols = area_matrix(h, SIZE), area_matrix(w, SIZE)
        self.stack = np.zeros((STACK, SIZE, SIZE), np.uint8)

    def _frame(self, screens: list[np.ndarray]) -> np.ndarray:
        grey = np.maximum(screens[-2], screens[-1]).astype(np.float64)
        # einsum, not `@`: multi-threaded BLAS beside a busy trainer took 12 ms per frame here (einsum: 1 ms)
        small = np.einsum("ij,jk->ik", np.einsum("ij,jk->ik", self._rows, grey), self._cols.T)
        return np.clip(np.rint(small), 0, 255).astype(np.uint8)

    def reset(self, rng: np.random.Generator, noops: int | None = None) -> np.ndarray:
        """A new game after `noops` (None: 0-NOOP_MAX at random) no-op frames and FIRE (where the game has it);
        its first observation."""
        if noops is not None and not 0 <= noops <= NOOP_MAX:
            raise ValueError(f"noops must be within 0-{NOOP_MAX}, got {noops}")
        self.ale.reset_game()
        for _ in range(int(rng.integers(0, NOOP_MAX + 1)) if noops is None else noops):
            self.ale.act(self.actions[0])
        self.stack[:] = 0
        if self.fire is not None:
            self.step(self.fire)
        return self.stack

    def step(self, action: int) -> float:
        """One agent step (FRAMESKIP frames of `action`, an index into the minimal set); its reward."""
        reward, screens = 0.0, []
        for k in range(FRAMESKIP):
            reward += self.ale.act(self.actions[action])
            if k >= FRAMESKIP - 2:
                screens.append(self.ale.getScreenGrayscale())
            if self.ale.game_over():
                break
        if len(screens) < 2:
            screens = [self.ale.getScreenGrayscale()] * 2
        self.stack = np.roll(self.stack, -1, axis=0)
        self.stack[-1] = self._frame(screens)
        return reward

    def ram(self) -> np.ndarray:
        return self.ale.getRAM()


def diagnosis_parser(doc: str, name: str, games: int) -> argparse.ArgumentParser:
    """The command line the RAM diagnoses share: a checkpoint, how many games, a seed, where to write NAME[-TAG].*"""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("checkpoint", help="a run directory (its newest checkpoint) or a checkpoint .npz")
    p.add_argument("--games", type=int, default=games)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="", help=f"output name suffix: {name}-TAG.{{json,png}}")
    p.add_argument("--out-dir", default="benchmarks/results")
    return p


def load_model_for(path: str, game: str, prog: str) -> tuple[Any, Any] | None:
    """(the located checkpoint, its keras model) when `path` holds a checkpoint of `game`; else None after a
    one-line error on stderr naming what to give instead."""
    from ba3c.evaluate import locate_checkpoint
    from ba3c.evaluation import EvalError, model_from_checkpoint

    try:
        loaded = locate_checkpoint(path)
        model, spec, _cfg = model_from_checkpoint(loaded.checkpoint)
    except EvalError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None
    if spec.name != game:
        print(f"{prog}: the checkpoint plays {spec.name}; this reads {game}'s RAM (give a {game} run)", file=sys.stderr)
        return None
    return loaded, model
