"""studies/batch_scaling (python -m studies.batch_scaling): points, a short CartPole point through the real trainer,
and the analysis."""
from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, subprocess_env
from studies.batch_scaling.batch_scaling import Point, parse_point


def test_points_become_rehearsals_of_the_global_batch():
    p = parse_point("2048:sqrt")
    assert p.rehearse_ranks == 32 and p.trainer_flags() == ["--train-batch", "64", "--rehearse-ranks", "32",
                                                            "--lr-scaling", "sqrt"]
    paper = parse_point("2048:paper")
    assert paper.rehearse_ranks == 64 and paper.trainer_flags()[:2] == ["--preset", "paper"]
    assert Point(256, "linear").name == "gb256-linear"
    assert parse_point("2048:kl").trainer_flags()[-2:] == ["--kl-lr-max", "16"]
    assert parse_point("2048:kl1").trainer_flags()[-4:] == ["--lr-adapt", "kl", "--kl-lr-max", "1"]
    assert parse_point("2048:kl1ent").trainer_flags()[-2:] == ["--entropy-coef", "0.00177"]
    assert parse_point("2048:advnorm").trainer_flags()[-4:] == ["--lr-scaling", "sqrt", "--advantage-norm", "batch"]
    for bad in ("2048", "100:sqrt", "2048:cubic", "8192:sqrt"):
        with pytest.raises(SystemExit, match="batch_scaling: point"):
            parse_point(bad)


@pytest.mark.slow
def test_cartpole_point_runs_then_curve_survives_its_run_dir(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    base = [sys.executable, "-m", "studies.batch_scaling", "--env", "CartPole-v1", "--points", "64:sqrt,128:sqrt",
            "--target", "60", "--frame-cap", "30000", "--max-hours", "0.05", "--nice", "0",
            "--eval-every-frames", "10000", "--eval-episodes", "2", "--runs-dir", str(runs), "--out", str(out)]
    p = subprocess.run([*base, "--run", "128:sqrt"], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    config = json.loads((runs / "gb128-sqrt" / "config.json").read_text())
    assert config["run"]["rehearse_ranks"] == 2 and config["learn"]["train_batch"] == 64
    meta = json.loads((runs / "gb128-sqrt" / "meta.json").read_text())
    assert meta["global_batch"] == 128
    assert config["learn"]["noise_scale_every"] == 10  # the noise scale is measured along every point
    res = json.loads((out / "batch_scaling-cartpole-v1.json").read_text())
    [point] = res["points"]  # 64:sqrt has no run on CartPole: not listed
    assert point["point"] == "gb128-sqrt" and point["state"] in ("reached", "frame cap")
    assert point["frames_total"] >= (point["frames_to_target"] or 30000) and point["cpu_hours"] > 0
    assert (out / "batch_scaling-cartpole-v1.png").stat().st_size > 5000
    # the periodic evaluation ran beside the training criterion and its curve is kept with the results
    evals = (out / "batch_scaling-cartpole-v1-gb128-sqrt-eval.csv").read_text().splitlines()
    assert len(evals) >= 2 and point["best_eval"] is not None and point["emulators"] == 2 * config["sim"]["num_envs"]
    [window] = point["noise_scale"]  # all in the first million frames: one rehearsed rank's batch against both's
    assert window["b_small"] == 64 and window["b_big"] == 128 and window["measurements"] >= 10
    assert window["trace_sigma"] > 0 and window["policy_trace_sigma"] > 0
    # the committed copy of progress.csv carries the curve once the run directory is gone ...
    shutil.rmtree(runs)
    p = subprocess.run([*base, "--analyze-only"], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    again = json.loads((out / "batch_scaling-cartpole-v1.json").read_text())
    assert again["points"][0]["frames_total"] == point["frames_total"]
    assert again["points"][0]["best_eval"] == point["best_eval"]
    assert "batch_scaling-cartpole-v1-gb128-sqrt-progress.csv" in again["points"][0]["source"]
    # ... and the kept state continues the point on a "new machine" (no run directory)
    state = out / "batch_scaling-state" / "cartpole-v1-gb128-sqrt"
    assert list((state / "checkpoints").glob("ckpt-*.npz")) and (state / "config.json").exists()
    more = [a if a != "30000" else "60000" for a in base]
    p = subprocess.run([*more, "--target", "1e9", "--run", "128:sqrt"], cwd=ROOT, env=subprocess_env(),
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "continuing from" in p.stdout and "resuming from" in p.stdout
    last = json.loads((out / "batch_scaling-cartpole-v1.json").read_text())["points"][0]
    assert last["frames_total"] >= 60000 and last["state"] == "frame cap"


@pytest.mark.slow
def test_sigterm_stops_a_point_and_keeps_what_it_reached(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "studies.batch_scaling", "--env", "CartPole-v1", "--points",
                             "64:sqrt", "--run", "64:sqrt", "--target", "1e9", "--frame-cap", "50000000", "--nice", "0",
                             "--runs-dir", str(runs), "--out", str(out)], cwd=ROOT, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    progress = runs / "gb64-sqrt" / "progress.csv"
    deadline = time.time() + 300  # a bound on a broken start, not a speed requirement
    while not progress.exists() or len(progress.read_text().splitlines()) < 3:
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-2000:] if proc.stdout else ""
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, text[-2000:]
    [point] = json.loads((out / "batch_scaling-cartpole-v1.json").read_text())["points"]
    assert point["state"] == "partial" and point["frames_total"] > 0
    assert list((out / "batch_scaling-state" / "cartpole-v1-gb64-sqrt" / "checkpoints").glob("ckpt-*.npz"))
    # a point that will not reach the target is given up: reported with the reason, skipped by --run next
    base = [sys.executable, "-m", "studies.batch_scaling", "--env", "CartPole-v1", "--points", "64:sqrt",
            "--target", "1e9", "--runs-dir", str(runs), "--out", str(out)]
    p = subprocess.run([*base, "--abandon", "64:sqrt"], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "--reason" in p.stderr
    p = subprocess.run([*base, "--abandon", "64:sqrt", "--reason", "stopped by the test"], cwd=ROOT,
                       env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    [point] = json.loads((out / "batch_scaling-cartpole-v1.json").read_text())["points"]
    assert (point["state"], point["note"]) == ("abandoned", "stopped by the test")
    p = subprocess.run([*base, "--run", "next"], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "every point is finished" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]


def test_noise_windows_pool_means_before_the_ratio():
    from ba3c.learner import noise_scale
    from studies.batch_scaling.batch_scaling import noise_windows

    rows = [{"frames": "500000", "noise_n": "3", "grad_sq_small": "4.0", "grad_sq_big": "1.0", "noise_b_small": "64",
             "noise_b_big": "256"},
            {"frames": "900000", "noise_n": "1", "grad_sq_small": "8.0", "grad_sq_big": "3.0", "noise_b_small": "64",
             "noise_b_big": "256"},
            {"frames": "950000", "noise_n": "", "grad_sq_small": "", "grad_sq_big": ""},  # a row with no measurement
            {"frames": "960000", "noise_n": "5", "grad_sq_small": "900.0", "grad_sq_big": "800.0",
             "noise_b_small": "64", "noise_b_big": "256", "guard": "collapsed"},  # left out
            {"frames": "1500000", "noise_n": "2", "grad_sq_small": "2.0", "grad_sq_big": "1.0", "noise_b_small": "64",
             "noise_b_big": "256"}]
    first, second = noise_windows(rows)
    assert (first["frames_from"], first["frames_to"], first["measurements"]) == (0, 900000, 4)
    g2, trace, b = noise_scale((3 * 4.0 + 8.0) / 4, (3 * 1.0 + 3.0) / 4, 64, 256)
    assert first["grad_sq_true"] == pytest.approx(g2) and first["trace_sigma"] == pytest.approx(trace)
    assert first["b_simple"] == pytest.approx(b)
    assert first["modelled_frames_ratio_2048_vs_64"] == pytest.approx((1 + 2048 / b) / (1 + 64 / b))
    assert second["frames_from"] == 1_000_000 and second["measurements"] == 2
    assert "b_simple_policy" not in first  # rows from before the policy term was logged
    # a stretch a rollback threw away (updates 10 < u <= 20) is left out too
    rows = [{**r, "updates": str(u)} for r, u in zip(rows, (5, 15, 16, 17, 30))]
    rollback = [{"event": "rollback", "updates": "20", "snapshot_update": "10"}, {"event": "warn", "updates": "3"}]
    [only_first, _] = noise_windows(rows, rollback)
    assert only_first["measurements"] == 3 and only_first["frames_to"] == 500000
    # windows of one's own, edges in millions of frames: a quarter window holds only its own rows
    [quarter] = noise_windows(rows, (), (0.75, 1.0))
    assert (quarter["frames_from"], quarter["frames_to"], quarter["measurements"]) == (750_000, 900_000, 1)
    assert quarter["b_simple"] == pytest.approx(noise_scale(8.0, 3.0, 64, 256)[2])


def _result(point: str, batch: int, reached: int | None, total: int, noise=None, eval_reached=None):
    from studies.batch_scaling.batch_scaling import PointResult
    return PointResult(point, batch, "sqrt", "reached" if reached or eval_reached else "partial", reached, total,
                       None, None, None, "", frames_to_target_eval=eval_reached, noise_scale=noise)


def test_noise_model_predicts_checks_and_flags_contradictions():
    from benchmarks.scaling_model import frames_from_noise_scale
    from studies.batch_scaling.batch_scaling import noise_model

    windows = [{"frames_from": 0, "frames_to": 1_000_000, "b_simple": 10.0, "b_simple_policy": 1000.0},
               {"frames_from": 1_000_000, "frames_to": 2_000_000, "b_simple": float("nan"), "b_simple_policy": 2000.0},
               {"frames_from": 2_000_000, "frames_to": 9_000_000, "b_simple": 500.0, "b_simple_policy": 4000.0}]
    results = [_result("gb64-sqrt", 64, 5_000_000, 5_000_000),
               _result("gb256-sqrt", 256, 9_500_000, 9_500_000, windows, eval_reached=8_000_000),
               _result("gb2048-none", 2048, None, 60_000_000)]
    model = noise_model(results)
    assert model["modelled"] and model["source_point"] == "gb256-sqrt"
    assert model["source_frames"] == 8_000_000 and model["source_criterion"] == "evaluation"
    whole = model["terms"]["whole loss"]
    # the unresolved (nan) window counts with the one before it; the source's frames end at its target
    expected = frames_from_noise_scale([(2e6, 10.0), (6e6, 500.0)], 256, 2048)
    assert whole["frames"]["2048"] == pytest.approx(expected)
    assert whole["frames"]["256"] == pytest.approx(8e6)
    [check] = whole["checks"]
    assert check["point"] == "gb64-sqrt" and check["measured"] == 5_000_000
    assert check["modelled_over_measured"] == pytest.approx(whole["frames"]["64"] / 5e6)
    # gb2048-none ran 60 M frames without reaching the target: a contradiction wherever the model says fewer
    policy = model["terms"]["policy term"]
    assert (policy["frames"]["2048"] < 60e6) == ("2048" in policy["contradicted"])
    assert (whole["frames"]["2048"] < 60e6) == ("2048" in whole["contradicted"])
    err = {t: abs(math.log(v["checks"][0]["modelled_over_measured"])) for t, v in model["terms"].items()}
    assert model["projection_term"] == min(err, key=err.get)
    assert noise_model([_result("gb64-sqrt", 64, 5_000_000, 5_000_000)]) is None  # no noise measured


def test_a_retired_rule_is_analysed_but_not_run(tmp_path):
    """kl, kl1, kl1ent and advnorm need trainer options that were removed: their kept curves are still read,
    but running such a point says so at once instead of starting a trainer that refuses the option."""
    from studies.batch_scaling.batch_scaling import main

    with pytest.raises(SystemExit, match="gb2048-kl: the trainer options of rule kl were removed"):
        main(["--env", "CartPole-v1", "--run", "2048:kl", "--runs-dir", str(tmp_path / "runs"),
              "--out", str(tmp_path / "out")])
    assert not (tmp_path / "runs").exists()
