"""The progress line's rates: measured between sync points, never over start-up."""
from __future__ import annotations

import csv
import dataclasses
from typing import Iterator

import pytest

from ba3c.config import Config, RunConfig
from ba3c.guard import HEALTHY, IntervalStats
from ba3c.learner import StepStats
from ba3c.report import Reporter
from ba3c.state import RunState

META = {"env": {"kind": "atari", "name": "boxing"}, "model": "nature", "num_params": 1, "ranks": 1,
        "dist_backend": "none", "global_batch": 64, "lr_effective": 1e-4}
STATS = StepStats(policy_loss=0.0, value_loss=0.0, entropy=1.0, grad_norm=0.1, train_s=0.01, allreduce_s=0.0,
                  policy_lag=0.0)


@pytest.fixture
def run(tmp_path) -> Iterator[tuple[RunState, Reporter]]:
    """A fresh run's state and its Reporter (a line every 5 s, 4,000 updates of 256 frames), writing to tmp_path."""
    cfg = dataclasses.replace(Config(), run=RunConfig(total_frames=1_000_000, log_interval_s=5.0))
    state = RunState()
    state.start_clocks()
    reporter = Reporter(str(tmp_path), cfg, META, state, total_updates=4_000, frames_per_update=256, resumed=False)
    yield state, reporter
    reporter.writer.close()


def test_the_first_line_leaves_start_up_out_of_fps_and_eta(run, tmp_path, capsys):
    """Start-up (here 30 s, with 200,000 frames of --decorrelate-steps' random play and one update) is counted
    in frames but must not enter the rates: the first line's rates are those of training between sync points."""
    state, reporter = run
    t0 = state.t_start

    def sync(seconds: float, updates: int, frames: int) -> None:
        state.updates, state.frames = updates, frames
        reporter.sync(state, [], {}, STATS, IntervalStats(updates, 1.0, 0.1, None), HEALTHY, 1e-4, t0 + seconds,
                      force=False)

    sync(30.0, 1, 200_256)  # the first sync point, after start-up: no line yet
    assert "fps" not in capsys.readouterr().out
    sync(33.0, 31, 207_936)  # 3 s later: not yet a log interval since the first sync point
    sync(40.0, 101, 225_856)  # 10 s and 100 updates (25,600 frames) after the first sync point
    line = capsys.readouterr().out
    assert "2,560 fps" in line and "10.00 upd/s" in line, line
    assert "ETA 0:06:29" in line, line  # (4,000 - 101) updates at 10 per second
    with open(tmp_path / "progress.csv") as f:  # each row is flushed as it is written
        rows = list(csv.DictReader(f))
    assert [float(r["frames_per_s"]) for r in rows] == [2560.0]


def test_a_forced_first_row_is_still_written(run, tmp_path, capsys):
    """A run that ends at its first sync point still gets its row (rates over its whole time)."""
    state, reporter = run
    state.updates, state.frames = 10, 2_560
    reporter.sync(state, [], {}, STATS, IntervalStats(10, 1.0, 0.1, None), HEALTHY, 1e-4, state.t_start + 2.0,
                  force=True)
    assert "1,280 fps" in capsys.readouterr().out
