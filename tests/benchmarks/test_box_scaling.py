"""The cluster in the box's arithmetic, without root: the emulated link, the straggler prediction, the window's
frames/s from progress.csv rows, the waiting term (E[max] of the ranks' update times) and box_scaling's model
(the runs themselves: tests/multirank/test_box_cluster.py, benchmarks/box_scaling.py)."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks import box_cluster, box_scaling, scaling_model as sm


def test_emulated_link_is_the_models_ethernet_scaled_to_the_rate():
    fit = box_cluster.emulated_link(1e9)
    assert fit.bandwidth_bytes_per_s == pytest.approx(0.8 * 125e6)  # 0.8 x line rate, as the 10GbE entry
    assert fit.latency_s == sm.NETWORKS["10GbE"].latency_s and fit.overhead_s == 0.0


def test_straggler_prediction_by_hand():
    # 4 ranks, 1 MB at 100 MB/s: 2(3)/4 x 10 ms = 15 ms + 6 x 30 us = 15.18 ms of exchange
    t_ex = 0.015 + 6 * 30e-6
    assert box_cluster.straggler_update_s(0.100, 4, 1e6, 1e9, 2.0) == pytest.approx(2 * (0.100 - t_ex) + t_ex)
    assert box_cluster.straggler_update_s(0.100, 4, 1e6, 1e9, 1.0) == pytest.approx(0.100)
    line = box_cluster.straggler_report(0.1, 0.15, 4, 1e6, 1e9, 2.0, [0.5] * 4, [0.5, 0.5, 0.5, 0.25])
    assert "measured 100.0 ms" in line and "150.0 ms" in line and "as used 2.00x" in line
    assert "too few" in box_cluster.straggler_report(None, 0.1, 4, 1e6, 1e9, 2.0, [0.5], [0.25])


def test_window_rate_uses_rows_from_the_warmup_on(tmp_path):
    p = tmp_path / "progress.csv"
    p.write_text("time_s,frames,updates\n5.0,100,5\n10.0,1000,50\n20.0,3000,150\n30.0,5000,250\n")
    r = box_scaling.window_rate(str(p), 10.0)
    assert r["frames_per_s"] == pytest.approx(4000 / 20) and r["s_per_update"] == pytest.approx(20 / 200)
    assert box_scaling.window_rate(str(p), 25.0) is None  # one row: no window


def test_expected_max_of_ranks_by_resampling():
    assert sm.expected_max_s([[0.01, 0.03]]) == pytest.approx(0.02)  # one rank: its mean
    assert sm.expected_max_s([[0.01] * 5, [0.02] * 3]) == pytest.approx(0.02)  # no spread: the slower rank
    # two ranks, each 0 or 1 s at even odds: the max is 1 unless both draw 0, E = 3/4 (20,000 draws: sd 0.003)
    assert sm.expected_max_s([[0.0, 1.0], [0.0, 1.0]]) == pytest.approx(0.75, abs=0.02)
    # four such ranks: 1 - 1/16
    assert sm.expected_max_s([[0.0, 1.0]] * 4) == pytest.approx(15 / 16, abs=0.02)
    assert sm.sync_update_s([[0.01] * 5, [0.02] * 3], 0.005) == pytest.approx(0.025)
    with pytest.raises(ValueError):
        sm.expected_max_s([[0.01], []])


def test_update_intervals_keep_the_last_seconds(tmp_path):
    p = tmp_path / "rank0.npy"
    np.save(p, np.array([0.0, 1.0, 5.0, 5.5, 6.0, 7.0]))
    assert box_scaling.update_intervals(str(p), 2.0) == pytest.approx([0.5, 0.5, 1.0])  # ends from 5.0 on


def test_model_point_by_hand():
    # 2 ranks whose updates take 10 or 30 ms at even odds: mean 20 ms, E[max of 2] = 10/4 + 30 x 3/4 = 25 ms
    control = [[0.01, 0.03] * 50, [0.01, 0.03] * 50]
    point = {"nodes": 2, "rate_bps": 1e9, "params": 1000, "exchange": {"frames_per_s": 150.0},
             "control": {"frames_per_s": 200.0, "s_per_update": 0.02}, "exchange_probe": {"mean_s": 0.001}}
    box_scaling.model_point(point, {"control": control, "exchange": [[0.028] * 10, [0.028] * 10]}, 2.0, 5)
    m = point["modelled"]
    t_ex = 0.001 * (1 + box_scaling.SYNC_COLLECTIVES / 5)  # the gradient's and the sync point's collectives
    assert m["t_exchange_s"] == pytest.approx(t_ex)
    assert m["t_expected_max_s"] == pytest.approx(0.025, abs=0.0005)
    assert m["t_update_s"] == pytest.approx(m["t_expected_max_s"] + t_ex)
    assert m["efficiency"] == pytest.approx(2 / m["t_update_s"] / (2 / 0.02))
    assert point["efficiency"] == pytest.approx(0.75)
    assert point["model_error"] == pytest.approx((m["efficiency"] - 0.75) / 0.75)
    assert point["update_time_error"] == pytest.approx((m["t_update_s"] - 0.028) / 0.028)
    assert "straggler" not in point
    # the straggler: the last rank's control times doubled (nominal); no probe with it slowed: the link model
    point["straggler_probe"] = {"mean_s": 0.002}
    box_scaling.model_point(point, {"control": control, "exchange": [[0.028] * 10] * 2,
                                    "straggler_exchange": [[0.05] * 10] * 2}, 2.0, 5)
    st = point["straggler"]
    # rank 1 at 20 or 60 ms: the pairs' maxima 20, 60, 30, 60 at even odds: E = 42.5 ms
    assert st["modelled_nominal_s"] - st["t_exchange_s"] == pytest.approx(0.0425, abs=0.0007)
    assert st["t_exchange_s"] == pytest.approx(0.002 * 1.4)
    assert st["modelled_from_slowed_control_s"] is None and st["error_from_slowed_control"] is None
    assert st["error_nominal"] == pytest.approx((st["modelled_nominal_s"] - 0.05) / 0.05)


def test_pool_averages_rates_and_puts_each_ranks_times_together():
    point = {"exchange0": {"frames_per_s": 100.0, "s_per_update": 0.02}, "exchange1": {"frames_per_s": 200.0,
                                                                                       "s_per_update": 0.01}}
    intervals = {"exchange0": [[0.02, 0.02], [0.03]], "exchange1": [[0.01], [0.01, 0.01]]}
    box_scaling.pool(point, intervals, "exchange", 2)
    assert point["exchange"]["frames_per_s"] == pytest.approx(150.0)
    assert point["exchange"]["s_per_update"] == pytest.approx(0.015)
    assert intervals == {"exchange": [[0.02, 0.02, 0.01], [0.03, 0.01, 0.01]]}
    assert [t["updates"] for t in point["exchange"]["update_times"]] == [3, 3] and "exchange0" not in point
    point = {"control0": {"frames_per_s": 1.0, "s_per_update": 1.0}, "control1": {"error": "exit 1"}}
    box_scaling.pool(point, {"control0": [[1.0]]}, "control", 2)
    assert point["control"] == {"error": "repeat 1: exit 1"}
