"""The progress line's rates: measured between sync points, never over start-up."""
from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterator

import pytest

from ba3c.config import Config, RunConfig
from ba3c.guard import HEALTHY, IntervalStats
from ba3c.learner import StepStats
from ba3c.report import Reporter, timer_table
from ba3c.state import RunState

META = {"env": {"kind": "atari", "name": "boxing"}, "model": "nature", "num_params": 1, "ranks": 1,
        "dist_backend": "none", "global_batch": 64, "lr_effective": 1e-4}
STATS = StepStats(terms={"policy_loss": 0.0, "value_loss": 0.0, "entropy": 1.0}, grad_norm=0.1, train_s=0.01,
                  allreduce_s=0.0, policy_lag=0.0)


@pytest.fixture
def run(tmp_path) -> Iterator[tuple[RunState, Reporter]]:
    """A fresh run's state and its Reporter (a line every 5 s), for a run of 1,000,000 frames, writing to tmp_path."""
    cfg = dataclasses.replace(Config(), run=RunConfig(total_frames=1_000_000, log_interval_s=5.0))
    state = RunState()
    state.start_clocks()
    reporter = Reporter(str(tmp_path), cfg, META, state, resumed=False)
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
    assert "[ 22.6%]" in line and "ETA 0:05:02" in line, line  # (1,000,000 - 225,856) frames at 2,560 per second
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


def test_stage_table_columns_line_up_for_any_stage_name():
    """The end-of-run table: seconds and shares in fixed columns whatever the stage names' lengths
    (`simulation thread: queue_put_wait` once pushed its row's numbers out of line)."""
    sim = {"env": 100.0, "queue_put_wait": 3.25, "a_much_longer_stage_name_than_any_today": 1.0}
    learn = {"allreduce": 1234.5, "train": 50.0}
    header, *rows = timer_table(sim, learn, wall=2000.0)
    assert header.startswith("stage (rank 0)") and header.endswith("seconds  % of wall")
    name_end = len(header) - len("   seconds  % of wall")  # the name column's width
    for row in rows:  # each row: a name, then the two right-aligned numbers exactly under their headings
        assert len(row) == len(header), "\n".join([header, *rows])
        assert row[name_end - 1] == " " and float(row[name_end:name_end + 10]) >= 0
        assert row[name_end + 10:].endswith("%") and float(row[name_end + 10:-1]) >= 0
    assert [r.split(":")[0].strip() for r in rows] == ["simulation thread"] * 3 + ["learner thread"] * 2
    put_wait = next(r for r in rows if "queue_put_wait" in r)
    assert put_wait.split()[-2:] == ["3.2", "0.2%"]
    assert timer_table({}, {}, 1.0)[0].startswith("stage (rank 0)")  # no stages: the header alone


def test_the_return_reads_none_until_an_episode_ends(run, capsys):
    """Before any episode of this process ends (a start, or every resume: the games start again) the line says
    so instead of a mean of nothing; then it gives the mean and how many episodes it covers."""
    state, reporter = run
    state.updates, state.frames, state.episodes = 10, 2_560, 331
    reporter.sync(state, [], {}, STATS, IntervalStats(10, 1.0, 0.1, None), HEALTHY, 1e-4, state.t_start + 2.0,
                  force=True)
    line = capsys.readouterr().out
    assert "return - (none ended yet; 331 episodes)" in line and "nan" not in line, line
    state.updates, state.frames, state.episodes = 20, 5_120, 333
    reporter.sync(state, [(-20.0, 800), (-18.0, 900)], {}, STATS, IntervalStats(10, 1.0, 0.1, None), HEALTHY, 1e-4,
                  state.t_start + 4.0, force=True)
    assert "return -19.00 (last 2; 333 episodes)" in capsys.readouterr().out


def test_mean_of_20_waits_for_20_games_of_this_process(run, tmp_path):
    """progress.csv's return_mean20 (the train20 criterion of benchmarks/time_to_score.py) is empty until 20
    episodes of this process have ended: right after a resume, one lucky game must not read as a mean of 20."""
    state, reporter = run
    for i, scores in enumerate(([21.0], [20.0] * 18, [-21.0], [0.0] * 5), start=1):
        state.updates, state.frames = 100 * i, 25_600 * i
        reporter.sync(state, [(s, 1000) for s in scores], {}, STATS, IntervalStats(100, 1.0, 0.1, None), HEALTHY,
                      1e-4, state.t_start + 10.0 * i, force=True)
    with open(tmp_path / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["return_mean20"] for r in rows[:2]] == ["", ""]  # 1, then 19 games
    assert float(rows[2]["return_mean20"]) == pytest.approx((21 + 18 * 20 - 21) / 20)
    assert float(rows[3]["return_mean20"]) == pytest.approx((14 * 20 - 21) / 20)  # the last 20 of 25
    assert float(rows[0]["return_mean"]) == 21.0  # the mean over up to 100 is there from the first game


def dqn_stats(q_abs_max: float) -> StepStats:
    return StepStats(terms={"td_loss": 0.1, "q_mean": 5.0, "td_abs_mean": 0.3, "q_abs_max": q_abs_max},
                     grad_norm=0.1, train_s=0.01, allreduce_s=0.0, policy_lag=0.0)


@pytest.mark.parametrize("bound", [100.0, None])
def test_q_values_past_what_a_state_can_be_worth_are_reported(tmp_path, capsys, bound):
    """Gorila's q_abs_max column is the largest |Q| of every update since the previous row (a rare diverging
    state in one batch must not hide behind the last update's); past the value bound a warning says so, once,
    and again only 10 times higher (the Breakout run with the Huber loss climbed from 143 to 16,238); without a
    bound (rewards not clipped) nothing is said."""
    cfg = dataclasses.replace(Config(), run=RunConfig(total_frames=1_000_000, log_interval_s=5.0))
    state = RunState()
    state.start_clocks()
    reporter = Reporter(str(tmp_path), cfg, META, state, resumed=False, value_bound=bound)
    warned = []
    for i, peaks in enumerate(([7.0, 90.0, 8.0], [150.0, 6.0], [900.0], [2_000.0, 3.0], [float("nan"), 5.0],
                               [1e9]), start=1):
        for q in peaks:
            reporter.add_update(dqn_stats(q))
        state.updates, state.frames = 100 * i, 25_600 * i
        reporter.sync(state, [], {}, dqn_stats(peaks[-1]), IntervalStats(100, 1.0, 0.1, None), HEALTHY, 1e-4,
                      state.t_start + 10.0 * i, force=True)
        warned.append([line for line in capsys.readouterr().err.splitlines() if "Q-network" in line])
    reporter.writer.close()
    with open(tmp_path / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["q_abs_max"]) for r in rows[:4]] == [90.0, 150.0, 900.0, 2_000.0]
    assert rows[4]["q_abs_max"] == "inf" and float(rows[5]["q_abs_max"]) == 1e9  # nan: as diverged as it gets
    assert [float(r["q_mean"]) for r in rows] == [5.0] * 6  # the other terms stay the last update's
    if bound is None:
        assert warned == [[]] * 6
        return
    assert [len(w) for w in warned] == [0, 1, 0, 1, 1, 0]  # nothing is higher than infinite
    assert "at update 200 the Q-network values a state at 150.0" in warned[1][0], warned[1]
    assert "no state is worth more than 100" in warned[1][0] and "2,000.0" in warned[3][0]


def test_one_count_behind_the_percent_the_frames_and_the_eta(run, capsys):
    """A replay's warm-up (Gorila: 80,000 agent steps per rank) is counted in the frames: the percent and the ETA
    are of the same frames (the line once read `[  0.1%] frames 321,648/2,000,000`)."""
    state, reporter = run
    t0 = state.t_start
    for seconds, updates, frames in ((60.0, 20, 321_648), (70.0, 220, 325_648)):  # after a warm-up of 320,000
        state.updates, state.frames = updates, frames
        reporter.sync(state, [], {}, STATS, IntervalStats(updates, 1.0, 0.1, None), HEALTHY, 1e-4, t0 + seconds,
                      force=True)
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("[ 32.6%] frames 325,648/1,000,000"), line
    assert "400 fps" in line and "ETA 0:28:05" in line, line  # 674,352 frames at 400 per second: 1,685.9 s


def test_a_line_while_the_learner_waits_for_a_warm_up(run, capsys):
    """Before the first update (a replay memory filling) a line every --log-interval-s: frames, the warm-up's
    steps and when it ends."""
    state, reporter = run
    t0 = state.t_start
    reporter.waiting(state, 0, 0, 80_000, t0 + 1.0)  # the first call starts the interval
    reporter.waiting(state, 4_000, 1_000, 80_000, t0 + 3.0)  # within the interval: nothing
    assert capsys.readouterr().out == ""
    reporter.waiting(state, 40_000, 10_000, 80_000, t0 + 10.0)
    line = capsys.readouterr().out
    assert line.startswith("[  4.0%] frames 40,000/1,000,000 | warm-up 10,000/80,000 agent steps per rank"), line
    assert "4,000 fps" in line and "warm-up ends in 0:01:10" in line, line
    reporter.waiting(state, 80_000, 0, 0, t0 + 20.0)  # no warm-up (the first batches): frames only
    assert "waiting for the first train batch" in capsys.readouterr().out
