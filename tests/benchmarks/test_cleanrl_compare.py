"""benchmarks/cleanrl_compare.py: which agent step each CleanRL SPS line stands for, the steady window, the
per-round ratio against the faster CleanRL variant, and one-line refusals of bad arguments. (The benchmark
itself needs a CleanRL environment: docs/results/throughput.md.)"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cleanrl_compare import Stint, cleanrl_sps_steps, summarize, window_rate

REPO = Path(__file__).resolve().parents[2]


def test_sps_lines_are_the_multiples_of_100_past_learning_starts():
    # dqn_atari prints when global_step > learning_starts and global_step % 4 == 0 and global_step % 100 == 0
    for starts in (0, 80, 100, 2000, 80_000, 1234):
        expected = [s for s in range(starts + 1, starts + 1000) if s % 4 == 0 and s % 100 == 0][:5]
        assert cleanrl_sps_steps(starts, 5) == expected


def test_window_drops_the_warmup_and_measures_the_rest():
    times = [10.0, 11.0, 12.0, 13.0, 14.0, 16.0]
    steps = [100, 200, 300, 400, 500, 700]
    rate, span, first, last = window_rate(times, steps, warmup_s=2.0)
    assert (first, last) == (2, 5) and span == 4.0 and rate == (700 - 300) / 4.0
    assert math.isnan(window_rate(times, steps, warmup_s=6.0)[0])  # nothing left after the warm-up
    assert math.isnan(window_rate([], [], 0.0)[0])


def test_each_ba3c_variant_is_compared_with_the_faster_cleanrl_of_its_round():
    def st(name: str, rnd: int, rate: float, cores: float, error: str = "") -> Stint:
        return Stint(name, rnd, agent_steps_per_s=rate, updates_per_s=rate / 4, cores_used=cores, error=error)

    stints = [st("cleanrl", 0, 10.0, 1.0), st("cleanrl-omp1", 0, 40.0, 0.5), st("ba3c-gorila", 0, 60.0, 0.6),
              st("ba3c-x", 0, 80.0, 1.0),
              st("cleanrl", 1, 50.0, 1.0), st("cleanrl-omp1", 1, 20.0, 0.1), st("ba3c-gorila", 1, 100.0, 1.0),
              st("ba3c-x", 1, 0.0, 1.0, error="failed")]
    s = summarize(stints, "breakout")
    r0 = [r for r in s["rounds"] if r["round"] == 0 and r["ba3c"] == "ba3c-gorila"][0]
    assert r0["cleanrl_best"] == "cleanrl-omp1" and r0["ratio_wall"] == 60.0 / 40.0
    assert r0["ratio_per_cpu_s"] == (60.0 / 0.6) / (40.0 / 0.5)  # the best per CPU-second, which may differ
    r1 = [r for r in s["rounds"] if r["round"] == 1 and r["ba3c"] == "ba3c-gorila"][0]
    assert r1["cleanrl_best"] == "cleanrl" and r1["ratio_wall"] == 2.0 and r1["ratio_per_cpu_s"] == 100.0 / 200.0
    assert s["ratio_wall_median"] == (1.5 + 2.0) / 2 and s["medians"]["ba3c-x"]["ratio_wall"] == 2.0  # errors left out


@pytest.mark.parametrize("args, message", [
    (["--cleanrl", "/nonexistent"], "no cleanrl/dqn_atari.py there"),
    (["--cleanrl", str(REPO), "--variant", "noequals"], "expected NAME=FLAGS"),
    (["--cleanrl", str(REPO), "--cleanrl-threads", "default,0"], "expected 'default' and/or positive numbers"),
])
def test_bad_arguments_one_line_exit_2(tmp_path: Path, args: list[str], message: str):
    if len(args) > 2:  # a checkout that passes the first check
        (tmp_path / "cleanrl").mkdir()
        (tmp_path / "cleanrl" / "dqn_atari.py").write_text("")
        args = ["--cleanrl", str(tmp_path), *args[2:]]
    p = subprocess.run([sys.executable, "-m", "benchmarks.cleanrl_compare", *args], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and message in p.stderr.strip().splitlines()[-1]
