"""The cluster in the box's arithmetic, without root: the emulated link, the straggler prediction, the window's
frames/s from progress.csv rows (the runs themselves: tests/test_box_cluster.py, benchmarks/box_scaling.py)."""
from __future__ import annotations

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
