"""The trainer, recording when each of its updates ends: per-update times for benchmarks/box_scaling.py.

    python -m benchmarks.update_times OUT.npy ARGS...

Runs `ba3c.train` with ARGS and writes OUT.npy: the `time.perf_counter()` at the end of every update of this
process (after its train step, before the sync point that may follow it), float64 seconds. Differences between
consecutive entries are the per-update times whose spread the scaling model's waiting term needs
(scaling_model.expected_max_s). progress.csv has a row at most every --log-interval-s, which averages over
dozens of updates and hides the spread; this is the one benchmark that needs each update, so the trainer is
wrapped here (its update method timed) instead of carrying an option for it.
"""
from __future__ import annotations

import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or not argv[0].endswith(".npy"):
        print("update_times: usage: python -m benchmarks.update_times OUT.npy ARGS...", file=sys.stderr)
        return 2
    out, args = argv[0], argv[1:]
    from ba3c import runner, train  # TensorFlow: only once the usage is right

    ends: list[float] = []
    train_update = runner.Trainer._train

    def timed(self: runner.Trainer, batch: object) -> None:
        train_update(self, batch)
        ends.append(time.perf_counter())

    runner.Trainer._train = timed  # type: ignore[method-assign]
    try:
        return train.main(args)
    finally:
        np.save(out, np.asarray(ends, dtype=np.float64))


if __name__ == "__main__":
    sys.exit(main())
