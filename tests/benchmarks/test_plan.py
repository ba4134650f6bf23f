"""The planner (benchmarks/plan.py) and the step-time fit (benchmarks/step_time.py) on synthetic inputs.

No timing: every number here is made up, and each expected value follows from the model's arithmetic.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest

from benchmarks import node_model as nm, plan, scaling_model as sm, step_time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# updates to the score: 40,000 at B = 64, 20,000 at 256, 5,000 at 1,024 (as frames: updates x 4 x B)
FRAMES = [sm.FramesToScore(64, 40_000 * 4 * 64, "gb64 (training return)"),
          sm.FramesToScore(256, 20_000 * 4 * 256, "gb256 (evaluation)"),
          sm.FramesToScore(1024, 5_000 * 4 * 1024, "gb1024 (evaluation)"),
          sm.FramesToScore(2048, None, "gb2048: partial"),
          sm.FramesToScore(2048, 4_000 * 4 * 2048, "noise scale along gb1024, whole loss", modelled=True)]
MEASURED = plan.measured_updates(FRAMES)
GAME = plan.Game("pong", "Pong 18", tuple(MEASURED), tuple(f for f in FRAMES if f.modelled))
NET = nm.Network("test net", 1e9, 10e-6, "assumed", "assumed", "made up")


def term(x: float) -> nm.Term:
    return nm.Term(x, "assumed", "made up")


def node(overhead: float = 0.01, per_sample: float = 1e-3, threads: int = 1, collect: float = 0.0,
         exchange_overhead: float = 0.002, serial: float = 1.0) -> nm.NodeModel:
    return nm.NodeModel(term(overhead), term(serial), term(per_sample), threads, term(collect), term(exchange_overhead),
                        (4, 256))


def exchange_s(nodes: int, net: nm.Network = NET, overhead: float = 0.002) -> float:
    return nm.update_time(node(exchange_overhead=overhead), net, 1, nodes, 1).exchange_s


def settings(nodes: int = 64, cores: int = 1, beyond: str = "plateau") -> plan.Settings:
    return plan.Settings(nodes, cores, "test", "test", beyond)


def test_measured_updates_are_frames_over_four_b_and_leave_out_unreached_and_modelled():
    assert [(u.global_batch, u.updates, u.label) for u in MEASURED] == [
        (64, 40_000, "measured"), (256, 20_000, "measured"), (1024, 5_000, "measured")]
    assert MEASURED[1].source == "gb256 (evaluation)"


def test_updates_between_measured_batches_are_interpolated_in_log_log():
    u = plan.updates_at(512, MEASURED)
    assert u.label == "fitted" and "256 and 1024" in u.source
    assert u.updates == pytest.approx(math.sqrt(20_000 * 5_000))  # halfway in log(batch): the geometric mean
    u = plan.updates_at(128, MEASURED)
    assert u.updates == pytest.approx(math.sqrt(40_000 * 20_000))


def test_updates_outside_the_measured_batches_are_assumed():
    below = plan.updates_at(32, MEASURED)
    assert below.label == "assumed" and below.updates == pytest.approx(80_000)  # batch 64's frames at half the batch
    above = plan.updates_at(4096, MEASURED)
    assert above.label == "assumed" and above.updates == 5_000  # plateau: no fewer than at 1,024
    modelled = [f for f in FRAMES if f.modelled]
    noise = plan.updates_at(2048, MEASURED, "noise-model", modelled)
    assert noise.label == "assumed" and noise.updates == pytest.approx(4_000) and "noise scale" in noise.source
    # the noise model has no entry at 4,096: the plateau
    assert plan.updates_at(4096, MEASURED, "noise-model", modelled).updates == 5_000
    assert plan.updates_at(256, MEASURED).label == "measured"
    with pytest.raises(ValueError):
        plan.updates_at(256, [])


def test_node_counts_and_global_batches():
    assert plan.node_counts(64) == [1, 2, 4, 8, 16, 32, 64]
    assert plan.node_counts(48) == [1, 2, 4, 8, 16, 32, 48]
    assert plan.node_counts(1) == [1]
    assert plan.global_batches(64, 4096) == [64, 128, 256, 512, 1024, 2048, 4096]
    assert plan.global_batches(48, 200) == [48, 96, 192]


def test_a_choice_is_the_node_models_update_time():
    n = node(overhead=0.01, per_sample=1e-3, threads=2, collect=4e-3)
    # 1e-3 s/sample at 2 threads -> 0.25e-3 on 8 cores; collection 4e-3 per core -> 0.5e-3 on 8; fixed cost serial
    c = plan.choice(4, 128, plan.updates_at(128, MEASURED), n, NET, 8)
    assert c.per_node_batch == 32 and c.overhead_s == pytest.approx(0.01)
    assert c.compute_s == pytest.approx(32 * 0.25e-3) and c.collect_s == pytest.approx(32 * 0.5e-3)
    assert c.step_s == pytest.approx(nm.update_time(n, NET, 32, 4, 8).total_s)
    assert c.exchange_s == pytest.approx(exchange_s(4)) and c.exchange_s > 0


def brute_force(n: int, s: plan.Settings, nd: nm.NodeModel) -> tuple[float, int]:
    best = None
    for gb in plan.global_batches(n, s.max_global_batch):
        step = nm.update_time(nd, NET, gb // n, n, s.cores_per_node).total_s
        minutes = plan.updates_at(gb, MEASURED).updates * step / 60
        best = min(best or (minutes, gb), (minutes, gb))
    return best


def test_envelope_picks_the_fastest_batch_and_its_efficiency_is_against_the_best_one_node_layout():
    s, nd = settings(), node()
    rows = plan.envelope(s, nd, NET, GAME)
    assert [r.nodes for r in rows] == plan.node_counts(64)
    for r in rows:
        minutes, gb = brute_force(r.nodes, s, nd)
        assert r.best.minutes == pytest.approx(minutes) and r.best.global_batch == gb
        assert r.best.per_node_batch == gb // r.nodes
        assert r.efficiency_vs_linear == pytest.approx(rows[0].best.minutes / (r.nodes * r.best.minutes))
        assert r.fixed.global_batch == 32 * r.nodes and r.fixed.per_node_batch == 32
        # the fixed layout's efficiency against the same (best) 1-node time, not its own
        assert r.fixed_efficiency_vs_linear == pytest.approx(rows[0].best.minutes / (r.nodes * r.fixed.minutes))
        assert r.best.minutes <= r.fixed.minutes + 1e-12  # the fixed layout is one of the choices
    assert rows[0].efficiency_vs_linear == 1.0 and rows[0].fixed_efficiency_vs_linear <= 1.0
    assert rows[-1].core_hours == pytest.approx(rows[-1].best.minutes / 60 * 64 * 1)


def test_a_large_fixed_cost_buys_the_batch_with_the_fewest_updates_and_none_buys_the_smallest():
    # a fixed cost that dwarfs compute: fewest updates wins (the plateau from 1,024 on; the smallest such batch)
    heavy = plan.envelope(settings(nodes=4), node(overhead=10.0, per_sample=1e-6, exchange_overhead=0.0), NET, GAME)
    assert [r.best.global_batch for r in heavy] == [1024, 1024, 1024]
    # no fixed cost, no exchange: time is frames x compute; batch 64 needs the fewest frames, split evenly
    free = plan.envelope(settings(nodes=4), node(overhead=0.0, per_sample=1e-3, exchange_overhead=0.0), nm.Network(
        "free", float("inf"), 0.0, "assumed", "assumed", ""), GAME)
    # (below batch 64 the frames are assumed equal to 64's: those batches tie with it)
    assert [r.best.minutes for r in free] == pytest.approx([40_000 * 64 * 1e-3 / n / 60 for n in (1, 2, 4)])
    assert [r.efficiency_vs_linear for r in free] == pytest.approx([1.0, 1.0, 1.0])


def test_binds_names_the_floor_or_the_updates():
    nd = node(overhead=0.008, per_sample=1e-4)
    c = dataclasses.replace(plan.choice(64, 1024, plan.updates_at(1024, MEASURED), nd, NET, 1), exchange_s=0.003)
    floor = "time per update (fixed cost + exchange)"
    assert plan.binds(c, 0.1, needed_step_s=0.005) == floor  # the floor (11 ms) alone is over the 5 ms allowed
    assert plan.binds(c, 0.1, needed_step_s=0.0115) == "updates"  # floor fits; the compute on b does not
    assert plan.binds(c, 0.6, needed_step_s=1.0) == "target met"
    assert plan.binds(c, 0.3, needed_step_s=None) == floor  # 11 of 12.6 ms is the floor
    big = plan.choice(1, 1024, plan.updates_at(1024, MEASURED), node(overhead=0.008, per_sample=1e-4), NET, 1)
    assert plan.binds(big, 1.0, None).startswith("updates")


def test_targets_give_the_time_per_update_they_need():
    rows = plan.envelope(settings(), node(), NET, GAME)
    r32 = next(r for r in rows if r.nodes == 32)
    assert r32.target == 0.5
    assert r32.needed_step_s == pytest.approx(rows[0].best.minutes * 60 / (0.5 * 32) / r32.best.updates)
    assert next(r for r in rows if r.nodes == 16).needed_step_s is None
    # with no floor the best it could do: the fewest samples to the score (40,000 x 64) over those at its B
    assert r32.sample_bound == pytest.approx(40_000 * 64 / (r32.best.updates * r32.best.global_batch))


def test_fit_step_time_recovers_a_line_and_weighs_relative_error():
    f = sm.fit_step_time([(b, 0.008 + 0.0005 * b) for b in (4, 8, 16, 32, 64, 128, 256)])
    assert f.overhead_s == pytest.approx(0.008) and f.per_sample_s == pytest.approx(0.0005)
    assert f.max_abs_error == pytest.approx(0.0, abs=1e-9) and f.seconds(10) == pytest.approx(0.013)
    # a point 10% off at the largest batch moves the fit less than it would with absolute least squares
    g = sm.fit_step_time([(4, 0.010), (8, 0.012), (16, 0.016), (256, 0.136 * 1.1)])
    assert g.overhead_s == pytest.approx(0.008, rel=0.1)
    # a negative intercept is refitted through the origin; fewer than 2 batches: None
    h = sm.fit_step_time([(4, 0.002), (8, 0.005), (16, 0.011)])
    assert h.overhead_s == 0.0 and h.per_sample_s > 0
    assert sm.fit_step_time([(4, 0.01), (4, 0.011)]) is None


def synthetic_runs() -> list[dict]:
    """Two workers at 1 thread, two rounds each; every cell a + c b, one round 1.5x slower (a busy spell)."""
    runs = []
    for seed in (0, 1):
        cells = []
        for r in range(2):
            slow = 1.5 if r == 1 else 1.0
            for b in (1, 4, 16, 64):
                cells.append({"round": r, "batch": b, "calls": 3, "median_s": slow * (0.006 + 0.0004 * b),
                              "min_s": 0.0, "cpu_s_per_call": 0.006 + 0.0004 * b})
            cells.append({"round": r, "batch": "optimizer", "calls": 3, "median_s": slow * 0.004, "min_s": 0.0,
                          "cpu_s_per_call": 0.004})
        runs.append({"threads": 1, "seed": seed, "load_avg_start": 1.0, "load_avg_end": 1.0, "cells": cells})
    return runs


def test_step_time_summary_fits_the_fastest_rounds_and_splits_each_batch():
    s = step_time.summarise(synthetic_runs(), tiny=1)["1"]
    fast = s["fits"]["least_disturbed"]
    assert fast["overhead_s"] == pytest.approx(0.006) and fast["per_sample_s"] == pytest.approx(0.0004)
    assert s["fits"]["median"]["per_sample_s"] == pytest.approx(0.0004 * 1.25)  # halfway between the two rounds
    b16 = s["batches"]["16"]
    assert b16["min_s"] == pytest.approx(0.0124) and b16["max_s"] == pytest.approx(1.5 * 0.0124)
    assert b16["least_disturbed"]["compute_s"] == pytest.approx(0.0064)
    assert b16["least_disturbed"]["exchange_s"] == 0.0
    assert s["tiny_batch"] == 1 and s["parts"]["optimizer"]["min_s"] == pytest.approx(0.004)
    assert len(s["fit_by_repeat"]) == 2
    assert s["fits"]["cpu"]["overhead_s"] == pytest.approx(0.006)  # CPU time per call: not slowed by the busy round
    assert s["fit_by_repeat"][0]["cpu"]["per_sample_s"] == pytest.approx(0.0004)


def synthetic_threads_file() -> dict:
    """step_time's layout at 1 and 2 threads: batch-1 time 10 ms at 1 thread and 6 ms at 2 (serial fraction 0.2)."""
    runs = []
    for threads, a in ((1, 0.0096), (2, 0.0056)):
        cells = [{"round": 0, "batch": b, "calls": 3, "median_s": a + 0.0004 * b, "min_s": a + 0.0004 * b,
                  "cpu_s_per_call": a + 0.0004 * b} for b in (1, 4, 16, 64)]
        runs.append({"threads": threads, "seed": 0, "load_avg_start": 1.0, "load_avg_end": 1.0, "cells": cells})
    return {"summary": step_time.summarise(runs, tiny=1), "machine": {"cpu": "x", "cores": 2}, "date": "d",
            "config": {"threads": [1, 2]}}


def test_planner_model_check_uses_the_step_time_fits_and_the_node_file():
    st = {"summary": step_time.summarise(synthetic_runs(), tiny=1), "machine": {"cpu": "x"}, "date": "d"}
    checks = plan.model_check(st, st, node(overhead=0.006, per_sample=0.0004))
    kinds = {c["check"] for c in checks}
    assert "fit to the least-disturbed times" in kinds and "node file's fit vs its own points" in kinds
    fast = [c for c in checks if c["check"] == "fit to the least-disturbed times"]
    assert [c["batch"] for c in fast] == [4, 16, 64] and all(abs(c["error"]) < 1e-9 for c in fast)


def run_plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.plan", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args, names", [(["--nodes", "0"], "--nodes"), (["--nodes", "many"], "--nodes"),
                                         (["--nodes", "5000"], "--nodes"),
                                         (["--network", "carrier-pigeon"], "--network"),
                                         (["--cores-per-node", "0"], "--cores-per-node")])
def test_bad_input_is_one_line_and_exit_2(args, names):
    p = run_plan(*args, "--no-write-scaling")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in p.stderr


def write_inputs(tmp_path) -> list[str]:
    """Synthetic input files for the planner; its options that name them."""
    bs = {"points": [{"point": f"gb{b}", "global_batch": b, "state": "reached", "frames_to_target": u * 4 * b}
                     for b, u in ((64, 40_000), (256, 20_000), (1024, 5_000))]}
    (tmp_path / "bs.json").write_text(json.dumps(bs))
    st = {"summary": step_time.summarise(synthetic_runs(), tiny=1), "machine": {"cpu": "x"}, "date": "d"}
    (tmp_path / "st.json").write_text(json.dumps(st))
    (tmp_path / "threads.json").write_text(json.dumps(synthetic_threads_file()))
    (tmp_path / "scaling.json").write_text(json.dumps({"machine": {}, "measured": []}))
    cfg = {"learn": {"train_batch": 32, "lr": 1e-3, "lr_scaling": "none", "beta1": 0.8, "beta2": 0.75,
                     "adam_eps": 1e-8, "clip_mode": "avg", "clip_norm": 0.1},
           "run": {"rehearse_ranks": 64, "preset": "paper"}, "sim": {"life_loss": "terminal"}}
    (tmp_path / "bo-config.json").write_text(json.dumps(cfg))
    (tmp_path / "bo.json").write_text(json.dumps({"target": 300.0, "metric": "periodic evaluation mean (eval.csv)",
                                                  "reached": True, "updates_to_target": 9_000}))
    return ["--batch-scaling", str(tmp_path / "bs.json"), "--step-time", str(tmp_path / "st.json"),
            "--node", str(tmp_path / "st.json"), "--threads", str(tmp_path / "threads.json"),
            "--breakout", str(tmp_path / "bo.json"), "--scaling", str(tmp_path / "scaling.json"),
            "--out", str(tmp_path / "out")]


def test_planner_end_to_end_on_synthetic_files(tmp_path):
    p = run_plan("--nodes", "64", "--cores-per-node", "4", "--network", "10gbe", *write_inputs(tmp_path))
    assert p.returncode == 0, p.stderr
    out = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert sorted(out["envelope"]) == ["breakout", "pong"]
    assert [r["nodes"] for r in out["envelope"]["pong"]] == plan.node_counts(64)
    assert out["envelope"]["pong"][0]["efficiency_vs_linear"] == 1.0
    games = out["inputs"]["games"]
    assert {u["label"] for g in games.values() for u in g["updates_measured"]} == {"measured"}
    # Breakout's one run: batch 32 x 64 rehearsed ranks, and its settings said
    assert [(u["global_batch"], u["updates"]) for u in games["breakout"]["updates_measured"]] == [(2048, 9_000)]
    assert "lost lives terminal" in games["breakout"]["runs"][0] and "betas 0.8/0.75" in games["breakout"]["runs"][0]
    # the node model's inputs, each labelled; the serial fraction from the threads file: 2 x 6 / 10 - 1
    node_json = out["inputs"]["node_model"]
    assert node_json["serial"]["value"] == pytest.approx(0.2) and node_json["serial"]["label"] == "fitted"
    assert all(node_json[k]["label"] in nm.LABELS for k in ("fixed_s", "serial", "train_s_per_sample"))
    # the headline: both games on both networks, minutes and core-hours per node count
    for g in ("breakout", "pong"):
        for k in plan.HEADLINE_NETWORKS:
            rows = out["time_to_score"][g][k]
            assert [r["nodes"] for r in rows] == plan.node_counts(64)
            assert all(r["core_hours"] == pytest.approx(r["minutes"] / 60 * r["nodes"] * 4) for r in rows)
    # the goal at 64 nodes on InfiniBand, and what would meet it
    goal = out["goal"]
    ib64 = out["time_to_score"]["breakout"]["ib100"][-1]
    assert goal["minutes"] == pytest.approx(ib64["minutes"]) and goal["met"] == (ib64["minutes"] <= 2.0)
    assert goal["needed_updates"] * goal["step_s"] == pytest.approx(120.0)
    sens = {v["variant"]: v for v in out["sensitivity"]}
    assert sens["as modelled"]["minutes"] == pytest.approx(ib64["minutes"])
    assert sens["updates to the score halved"]["minutes"] == pytest.approx(ib64["minutes"] / 2)
    assert sens["fixed cost halved"]["minutes"] < ib64["minutes"]
    local = out["local_sgd"]
    assert local["modelled"] is True and local["in_trainer"] is False
    assert sorted(local["by_local_steps"]) == sorted(str(h) for h in plan.LOCAL_STEPS)
    # averaging less often never costs time at equal updates, so the break-even factor is at least 1
    assert all(r["break_even_updates_factor"] >= 1.0 for rows in local["by_local_steps"].values() for r in rows)
    assert {c["updates_label"] for cs in out["all_choices"].values() for c in cs} <= {"measured", "fitted", "assumed"}
    env = json.loads((tmp_path / "scaling.json").read_text())["time_to_score_envelope"]
    assert env["modelled"] is True and env["node_model"] == node_json
    assert [r["nodes"] for r in env["games"]["pong"]["by_network"]["ib100"]] == plan.node_counts(64)
    assert "within 15%" in p.stdout or "NOT within 15%" in p.stdout


def test_a_sharded_optimizer_cuts_the_shared_optimizer_work_and_adds_two_collectives():
    sh = plan.Sharding(optimizer_s=0.003, shard_fixed_s=0.0002, shard_all_s=0.002, flatten_s=0.0005,
                       unflatten_s=0.0003)
    assert sh.saving_s(1) == 0.0
    assert sh.saving_s(4) == pytest.approx(0.003 - 0.0002 - 0.0005 - 0.0005 - 0.0003)
    nd = node(overhead=0.01)
    base = plan.envelope(settings(nodes=8), nd, NET, GAME)
    sharded = plan.envelope(settings(nodes=8), nd, NET, GAME, sharding=sh)
    assert sharded[0].best.minutes == base[0].best.minutes  # one node: nothing to share, no collective
    for r in sharded[1:]:
        assert r.best.overhead_s == pytest.approx(0.01 - sh.saving_s(r.nodes))
        # the same ring bytes, plus two collectives' fixed cost and latency
        assert r.best.exchange_s == pytest.approx(exchange_s(r.nodes) + 2 * (0.002 + 2 * 10e-6))


def test_sharding_parts_come_from_the_floor_probe_summary():
    summary = {"optimizer": {"cpu_s_per_call_median": 0.003}, "flatten": {"cpu_s_per_call_median": 0.001},
               "unflatten": {"cpu_s_per_call_median": 0.0005},
               **{f"shard {k}": {"cpu_s_per_call_median": 0.0002 + 0.0028 / k} for k in (2, 4, 8, 64)}}
    sh = plan.sharding_from({"summary": summary, "date": "d"})
    assert sh.shard_fixed_s == pytest.approx(0.0002) and sh.shard_all_s == pytest.approx(0.0028)
    assert (sh.optimizer_s, sh.flatten_s, sh.unflatten_s) == (0.003, 0.001, 0.0005)
    assert plan.sharding_from(None) is None
    assert plan.sharding_from({"summary": {"optimizer": {"cpu_s_per_call_median": 0.003}}}) is None


def test_floor_probe_ratios_are_per_round_against_the_baseline():
    from benchmarks import floor_probe

    cells = [{"round": r, "variant": v, "cpu_s_per_call": t}
             for r, (a, b) in enumerate(((0.010, 0.012), (0.020, 0.022), (0.010, 0.015)))
             for v, t in (("train 1", a), ("train-xla 1", b))]
    s = floor_probe.summarise(cells)
    assert s["train 1"]["cpu_s_per_call_median"] == 0.010 and "vs" not in s["train 1"]
    assert s["train-xla 1"]["vs"] == "train 1"
    assert s["train-xla 1"]["ratio_median"] == pytest.approx(1.2)
    assert (s["train-xla 1"]["ratio_min"], s["train-xla 1"]["ratio_max"]) == pytest.approx((1.1, 1.5))


def test_local_steps_divide_the_exchange_and_keep_the_updates():
    nd = node(overhead=0.01)
    base = plan.envelope(settings(nodes=8), nd, NET, GAME)
    local = plan.envelope(settings(nodes=8), nd, NET, GAME, local_steps=4)
    assert local[0].best.minutes == base[0].best.minutes  # one node: no exchange to divide
    for n in (2, 4, 8):
        b = plan.choice(n, 1024, plan.updates_at(1024, MEASURED), nd, NET, 1)
        q = next(c for c in plan.choices_for(n, settings(nodes=8), nd, NET, GAME, local_steps=4)
                 if c.global_batch == 1024)
        assert q.exchange_s == pytest.approx(b.exchange_s / 4)
        assert q.updates == b.updates and q.overhead_s == b.overhead_s
    for r, q in zip(base, local):
        assert q.best.minutes <= r.best.minutes
