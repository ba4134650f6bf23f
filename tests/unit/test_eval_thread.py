"""The periodic evaluation thread: one evaluation plays, one waits, later ones are skipped (and say so)."""
from __future__ import annotations

import threading

import numpy as np

from ba3c.workers import EvalThread


class _Weights:
    """Stands in for the snapshot model: the thread only sets its weights."""

    def __init__(self) -> None:
        self.weights: list[np.ndarray] = []

    def set_weights(self, weights: list[np.ndarray]) -> None:
        self.weights = weights


def test_eval_thread_queues_one_and_skips_the_rest() -> None:
    started, release = threading.Event(), threading.Event()
    played: list[float] = []
    reported: list[tuple[dict, int]] = []

    def evaluate(model: _Weights, updates: int, cancel: threading.Event) -> dict:
        played.append(float(model.weights[0][0]))
        started.set()
        assert release.wait(60), "the test never released the evaluation"
        return {"mean": float(model.weights[0][0])}

    thread = EvalThread(_Weights(), evaluate, lambda result, frames, updates, time_s: reported.append((result, frames)))
    thread.start()
    assert thread.submit([np.array([1.0])], 1_000, 10, 1.0)
    assert started.wait(60), "the first evaluation never started"
    assert thread.submit([np.array([2.0])], 2_000, 20, 2.0)       # waits behind the one playing
    assert not thread.submit([np.array([3.0])], 3_000, 30, 3.0)   # skipped: the caller must say so
    release.set()
    thread.finish(wait=True)
    assert played == [1.0, 2.0]
    assert reported == [({"mean": 1.0}, 1_000), ({"mean": 2.0}, 2_000)]
