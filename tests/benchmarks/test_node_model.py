"""benchmarks/node_model.py: the one node model by hand, its inputs from files, and the committed results made by it.

The last tests read the committed results: the README's 64-node projection rows (scaling.json `projection`, written
by benchmarks/scaling.py) and the planner's envelope (scaling.json `time_to_score_envelope`, written by
benchmarks/plan.py) must come from the same model and the same inputs, and those inputs from the files as they are.
"""
from __future__ import annotations

import json

import pytest

from benchmarks import compare, node_model as nm, plan, scaling_model as sm, step_time
from conftest import ROOT

NET = nm.Network("L", 1e9, 10e-6, "assumed", "assumed", "made up")


def term(x: float) -> nm.Term:
    return nm.Term(x, "assumed", "made up")


def node(fixed: float = 0.01, serial: float = 0.5, per_sample: float = 1e-3, threads: int = 4,
         collect: float = 8e-3, exchange_overhead: float = 0.002) -> nm.NodeModel:
    return nm.NodeModel(term(fixed), term(serial), term(per_sample), threads, term(collect), term(exchange_overhead))


def test_amdahl_and_the_serial_fraction_from_one_and_two_threads():
    assert nm.amdahl(0.0, 8) == pytest.approx(1 / 8) and nm.amdahl(1.0, 8) == 1.0 and nm.amdahl(0.3, 1) == 1.0
    assert nm.serial_fraction(0.010, 0.006) == pytest.approx(0.2)  # 0.6 = s + (1 - s) / 2
    assert nm.serial_fraction(0.010, 0.012) == 1.0  # slower on two threads: wholly serial, not above 1
    assert nm.serial_fraction(0.010, 0.004) == 0.0  # faster than linear (noise): clipped at 0


def test_update_time_by_hand():
    n = node()
    # fixed: 10 ms at 4 threads, s = 0.5 -> on 8 cores x (0.5 + 0.5/8) / (0.5 + 0.5/4) = 0.9
    # train: 1 ms/sample at 4 threads -> 0.5 ms on 8 cores; collection 8 ms/sample/core -> 1 ms on 8
    t = nm.update_time(n, NET, 32, 1, 8)
    assert (t.fixed_s, t.train_s, t.collect_s, t.exchange_s) == pytest.approx((0.009, 0.016, 0.032, 0.0))
    four = nm.update_time(n, NET, 32, 4, 8)  # the ring: 2 ms + 2(3)/4 x 6.75 MB / 1 GB/s + 6 x 10 us
    assert four.exchange_s == pytest.approx(0.002 + 1.5 * nm.GRADIENT_BYTES / 1e9 + 6 * 10e-6)
    assert four.total_s == pytest.approx(0.009 + 0.016 + 0.032 + four.exchange_s)
    assert four.floor_s == pytest.approx(0.009 + four.exchange_s)
    assert n.fixed_at(4) == pytest.approx(0.01)  # at the anchor's own thread count: as measured
    with pytest.raises(ValueError):
        nm.Term(1.0, "guessed", "")


def test_projection_is_frames_over_the_update_time_and_weak_scaling_against_one_node():
    n = node()
    pts = nm.project(n, {"L": NET}, 8, batches=(32,), exposed={"half": 0.5})
    by = {(p.nodes, p.exchange): p for p in pts}
    assert sorted({p.nodes for p in pts}) == list(sm.NODE_COUNTS)  # 32 x 128 = 4,096: the trainer's limit
    one, four = nm.update_time(n, NET, 32, 1, 8), nm.update_time(n, NET, 32, 4, 8)
    assert by[1, "sync"].frames_per_s == pytest.approx(4 * 32 / one.total_s) and by[1, "sync"].efficiency == 1.0
    assert by[4, "sync"].frames_per_s == pytest.approx(4 * 4 * 32 / four.total_s)
    assert by[4, "sync"].efficiency == pytest.approx(one.total_s / four.total_s)
    assert by[4, "half"].frames_per_s == pytest.approx(4 * 4 * 32 / (four.total_s - 0.5 * four.exchange_s))
    assert max(p.nodes for p in nm.project(n, {"L": NET}, 8, batches=(64,))) == 64  # 64 x 128 > 4,096
    assert nm.frames_per_s(n, NET, 32, 4, 8) == pytest.approx(by[4, "sync"].frames_per_s)


def threads_file() -> dict:
    """step_time's layout, 1 and 2 threads: batch 1 at 10 and 6 ms (s = 0.2), the fits' intercepts 9.6 and 5.6."""
    runs = []
    for threads, a in ((1, 0.0096), (2, 0.0056)):
        cells = [{"round": 0, "batch": b, "calls": 3, "median_s": a + 0.0004 * b, "min_s": a + 0.0004 * b,
                  "cpu_s_per_call": a + 0.0004 * b} for b in (1, 4, 16, 64)]
        runs.append({"threads": threads, "seed": 0, "load_avg_start": 1.0, "load_avg_end": 1.0, "cells": cells})
    return {"summary": step_time.summarise(runs, tiny=1), "machine": {"cpu": "x", "cores": 2}, "date": "d",
            "config": {"threads": [1, 2], "batches": [4, 16, 64]}}


def test_inputs_come_from_the_files_with_labels(tmp_path):
    node_file = {"machine": {"cores": 16, "cpu": "y"}, "date": "d", "command": "made up",
                 "summary": {"16": {"batches": {str(b): {"median_s": 0.008 + 6e-5 * b} for b in (32, 128, 512)},
                                    "tiny_batch": None},
                             "1": {"batches": {"32": {"median_s": 0.0244}}, "tiny_batch": None}}}
    (tmp_path / "node.json").write_text(json.dumps(node_file))
    (tmp_path / "threads.json").write_text(json.dumps(threads_file()))
    scaling = {"machine": {"cpu": "z"}, "date": "d",
               "measured": [{"ranks": 1, "layout": "core", "exchange": "sync", "frames_per_s": 1000.0}],
               "models": {"nature": {"train_samples_per_s_1thread": 500.0}},
               "fit": {"allreduce": {"horovod": {"overhead_s": 0.0015, "bandwidth_bytes_per_s": 1e9,
                                                 "latency_s": 0.0}}}}
    n = nm.load(scaling, str(tmp_path / "node.json"), str(tmp_path / "threads.json"))
    # the anchor: the fit at the file's largest thread count
    assert (n.threads, n.fitted_batches) == (16, (32, 128, 512))
    assert n.fixed_s.value == pytest.approx(0.008) and n.train_s_per_sample.value == pytest.approx(6e-5)
    assert n.serial.value == pytest.approx(0.2)  # the batch-1 medians
    assert n.collect_s_per_sample_core.value == pytest.approx(4 / 1000 - 1 / 500)  # pipeline less train step
    assert n.exchange_overhead_s.value == 0.0015
    assert {t.label for t in (n.fixed_s, n.serial, n.train_s_per_sample, n.collect_s_per_sample_core,
                              n.exchange_overhead_s)} == {"fitted"}
    assert "node.json" in n.fixed_s.source and "16-core y" in n.fixed_s.source
    est = nm.fixed_cost_threads(threads_file())
    assert est["intercept, medians"]["serial"] == pytest.approx(2 * 5.6 / 9.6 - 1)
    # no threads file: the fixed cost held serial, and said to be assumed; no node file: refused
    held = nm.load(scaling, str(tmp_path / "node.json"), str(tmp_path / "none.json"))
    assert (held.serial.value, held.serial.label) == (1.0, "assumed")
    assert nm.load(None, str(tmp_path / "node.json"), "").collect_s_per_sample_core.label == "assumed"
    with pytest.raises(LookupError):
        nm.load(scaling, str(tmp_path / "missing.json"))


def test_the_tcp_fraction_of_line_rate_comes_from_the_shaped_link_study():
    shaped = {"analysis": {"fits": {"horovod/default": {"efficiency": 0.5}}}}
    assert nm.tcp_efficiency(shaped) == (0.5, "fitted")
    assert nm.tcp_efficiency(None) == (nm.TCP_EFFICIENCY, "assumed")
    nets = nm.networks(*nm.tcp_efficiency(shaped))
    assert nets["10gbe"].bandwidth_bytes_per_s == pytest.approx(0.5 * 10e9 / 8)
    assert nets["10gbe"].bandwidth_label == "fitted"
    assert nets["10gbe-nominal"].bandwidth_bytes_per_s == pytest.approx(0.8 * 10e9 / 8)


# ---------------------------------------------------------------- the committed results

SCALING = json.loads((ROOT / "benchmarks" / "results" / "scaling" / "scaling.json").read_text())


def test_the_readme_projection_and_the_planner_envelope_come_from_one_model_and_the_same_inputs():
    """The README's 64-node rows (scaling.json `projection`) and the planner's minutes (`time_to_score_envelope`):
    the same node model's inputs, and the same update time at the same layout (64 nodes x 32 = batch 2,048)."""
    env = SCALING["time_to_score_envelope"]
    assert env["node_model"] == SCALING["node_model"], (
        "projection and planner used different node inputs: rerun python -m benchmarks.scaling --analyze-only "
        "benchmarks/results/scaling/scaling.json, then python -m benchmarks.plan")
    cores = env["settings"]["cores_per_node"]
    shown = [p for p in SCALING["projection"] if p["nodes"] == 64 and p["per_node_batch"] == 32
             and p["exchange"] == "sync" and p["network"] in compare.README_NETWORKS]
    assert {p["network"] for p in shown} == set(compare.README_NETWORKS) and all(p["cores"] == cores for p in shown)
    readme = compare.render_scaling(ROOT / "benchmarks" / "results" / "scaling" / "scaling.json")
    for p in shown:
        assert env["networks"][p["network"]] == SCALING["networks"][p["network"]]
        # the planner's fixed per-node batch of 32 at 64 nodes is the projection's layout: the same update time
        fixed = next(g for g in env["games"].values())["by_network"][p["network"]][-1]["fixed_per_node_batch"]
        assert fixed["nodes"] == 64 and fixed["global_batch"] == 2048
        assert 4 * 2048 / fixed["step_s"] == pytest.approx(p["frames_per_s"], rel=1e-9)
        assert any(f"{p['frames_per_s']:,.0f}" in line and p["network_name"] in line for line in readme)


def test_the_committed_node_model_is_what_the_files_give_now():
    """A changed input file (a new 16-core run, a new thread measurement) must be followed by new results."""
    made = nm.load(SCALING, nm.NODE_FILE, nm.THREADS_FILE).to_json()
    assert json.loads(json.dumps(made)) == SCALING["node_model"]
    assert SCALING["time_to_score_envelope"]["settings"]["node_file"] == "benchmarks/results/step_time/device16.json"
    # every input says what it is; the 16-core file keeps the numbers it was made from
    assert all(v["label"] in nm.LABELS for v in SCALING["node_model"].values() if isinstance(v, dict))
    d16 = json.loads((ROOT / nm.NODE_FILE).read_text())
    assert {b: round(int(b) / v["median_s"]) for b, v in d16["summary"]["16"]["batches"].items()} == {
        "32": 3050, "128": 7292, "512": 12800}
    assert d16["summary"]["1"]["batches"]["32"]["median_s"] == 0.0244 and d16["machine"]["cores"] == 16


def test_the_headline_covers_both_games_both_networks_and_1_to_64_nodes():
    env = SCALING["time_to_score_envelope"]
    assert set(env["games"]) == {"breakout", "pong"}
    for g in env["games"].values():
        assert set(g["by_network"]) == set(plan.HEADLINE_NETWORKS)
        for rows in g["by_network"].values():
            assert [r["nodes"] for r in rows] == [1, 2, 4, 8, 16, 32, 64]
            one = rows[0]["minutes"]
            assert all(r["efficiency_vs_linear"] == pytest.approx(one / (r["nodes"] * r["minutes"])) for r in rows)
            assert all(r["fixed_per_node_batch"]["efficiency_vs_linear"]
                       == pytest.approx(one / (r["nodes"] * r["fixed_per_node_batch"]["minutes"])) for r in rows)
