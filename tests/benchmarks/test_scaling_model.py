"""benchmarks/scaling_model.py: the allreduce model, its fit, efficiencies, the step-time fit and frames to a score, by
hand (the node model and its projection: tests/benchmarks/test_node_model.py)."""
from __future__ import annotations

import math

import pytest

from benchmarks import scaling_model as sm

FIT = sm.AllreduceFit(overhead_s=1e-3, bandwidth_bytes_per_s=1e9, latency_s=1e-5)


def test_t_allreduce_by_hand():
    assert sm.t_allreduce(1, 1e9, FIT) == 0.0  # one rank: no exchange
    # 1 ms + 2(1)/2 x 1 MB / 1 GB/s + 2(1) x 10 us = 1 ms + 1 ms + 0.02 ms
    assert sm.t_allreduce(2, 1e6, FIT) == pytest.approx(2.02e-3, rel=1e-12)
    # 0 + 2(3)/4 x 4 MB / 2 GB/s + 2(3) x 1 us = 3 ms + 0.006 ms
    assert sm.t_allreduce(4, 4e6, sm.AllreduceFit(0.0, 2e9, 1e-6)) == pytest.approx(3.006e-3, rel=1e-12)


def test_predict_efficiency_by_hand():
    fit = sm.AllreduceFit(0.01, 1e9, 0.0)
    # 250,000 floats = 1 MB; t_allreduce(2) = 10 ms + 1 ms; 100 ms / 111 ms
    assert sm.predict_efficiency(2, 0.1, fit, floats=250_000) == pytest.approx(0.1 / 0.111, rel=1e-12)
    assert sm.predict_efficiency(1, 0.1, fit, floats=250_000) == 1.0


def test_fit_recovers_the_model_exactly():
    a, bw, lat = 2e-3, 1e9, 5e-6
    true = sm.AllreduceFit(a, bw, lat)
    samples = [sm.AllreduceSample(r, n, sm.t_allreduce(r, n, true)) for r in (2, 4) for n in (1e4, 1e6, 1e7)]
    samples.append(sm.AllreduceSample(1, 1e6, 123.0))  # one rank: not an exchange, ignored
    fit = sm.fit_allreduce(samples)
    assert fit.points == 6
    assert fit.overhead_s == pytest.approx(a, rel=1e-6)
    assert fit.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-6)
    assert fit.latency_s == pytest.approx(lat, rel=1e-4)


def test_fit_one_rank_count_and_too_few_points():
    # r = 2 only: latency cannot be told from the fixed cost and is 0; t = 1 ms + bytes / 2 GB/s
    samples = [sm.AllreduceSample(2, n, 1e-3 + n / 2e9) for n in (1e6, 2e6, 4e6)]  # 1.5, 2, 3 ms
    fit = sm.fit_allreduce(samples)
    assert (fit.overhead_s, fit.latency_s, fit.points) == (pytest.approx(1e-3), 0.0, 3)
    assert fit.bandwidth_bytes_per_s == pytest.approx(2e9)
    assert sm.fit_allreduce(samples[:2]) is None
    # time that falls with size (noise): the negative bandwidth term is clipped to 0 -> infinite bandwidth
    noisy = sm.fit_allreduce([sm.AllreduceSample(2, n, t) for n, t in ((1e6, 2e-3), (2e6, 1.5e-3), (3e6, 1e-3))])
    assert noisy.bandwidth_bytes_per_s == math.inf and noisy.overhead_s == pytest.approx(2.5e-3)


def test_fit_json_round_trip():
    assert sm.AllreduceFit.from_json(FIT.to_json()) == FIT
    assert sm.AllreduceFit.from_json(None) is None


def test_weak_scaling_efficiency():
    assert sm.weak_scaling_efficiency(1800.0, 2, 1000.0, shared_cores=False) == pytest.approx(0.9)
    assert sm.weak_scaling_efficiency(1800.0, 2, 1000.0, shared_cores=True) == pytest.approx(1.8)  # fat layout


def test_frames_from_batch_scaling_prefers_the_evaluation_and_keeps_partial_points_only_when_evaluated():
    from benchmarks.scaling_results import frames_from_batch_scaling
    d = {"points": [
        {"point": "gb64-sqrt", "global_batch": 64, "state": "reached", "frames_to_target": 10e6},
        {"point": "gb2048-sqrt", "global_batch": 2048, "state": "abandoned", "frames_to_target": None},
        {"point": "gb2048-none", "global_batch": 2048, "state": "partial", "frames_to_target": None,
         "frames_to_target_eval": 12e6},
        {"point": "gb2048-paper", "global_batch": 2048, "state": "reached", "frames_to_target": 20e6,
         "frames_to_target_eval": 14e6},
        {"point": "gb1024-sqrt", "global_batch": 1024, "state": "partial", "frames_to_target": None},
    ]}
    got = {f.global_batch: f for f in frames_from_batch_scaling(d)}
    assert sorted(got) == [64, 2048]  # the unevaluated partial point is no measurement
    assert got[64].frames == 10e6 and got[64].source == "gb64-sqrt (training return)"
    assert got[2048].frames == 12e6 and got[2048].source == "gb2048-none (evaluation)"
    d["points"][2]["frames_to_target_eval"] = None
    got = {f.global_batch: f for f in frames_from_batch_scaling(d)}
    assert got[2048].frames == 14e6 and got[2048].source == "gb2048-paper (evaluation)"


def test_frames_from_noise_scale_by_hand():
    # one window whose noise scale equals the measured batch: frames(B) = F (1 + B / b) / 2
    assert sm.frames_from_noise_scale([(8e6, 256.0)], 256, 256) == pytest.approx(8e6)
    assert sm.frames_from_noise_scale([(8e6, 256.0)], 256, 2048) == pytest.approx(8e6 * 9 / 2)
    # two windows, each scaled by its own ratio
    two = [(2e6, 10.0), (6e6, 10_000.0)]
    expected = 2e6 * (1 + 64 / 10) / (1 + 256 / 10) + 6e6 * (1 + 64 / 1e4) / (1 + 256 / 1e4)
    assert sm.frames_from_noise_scale(two, 256, 64) == pytest.approx(expected)
    # far below the noise scale, frames do not depend on the batch; far above it, they grow with it
    assert sm.frames_from_noise_scale([(1e6, 1e12)], 64, 4096) == pytest.approx(1e6)
    assert sm.frames_from_noise_scale([(1e6, 1e-6)], 64, 4096) == pytest.approx(64e6, rel=1e-6)
    for bad in ([(1e6, 0.0)], [(-1.0, 10.0)], [(1e6, float("nan"))]):
        with pytest.raises(ValueError):
            sm.frames_from_noise_scale(bad, 64, 128)


def test_frames_from_batch_scaling_adds_the_models_uncontradicted_batches():
    from benchmarks.scaling_results import frames_from_batch_scaling
    d = {"points": [{"point": "gb256-sqrt", "global_batch": 256, "state": "reached", "frames_to_target": 19e6}],
         "noise_model": {"source_point": "gb256-sqrt", "projection_term": "whole loss", "terms": {
             "whole loss": {"frames": {"1024": 41e6, "2048": 70e6}, "contradicted": {"2048": ["gb2048-kl"]}},
             "policy term": {"frames": {"1024": 22e6, "2048": 26e6}, "contradicted": {}}}}}
    got = frames_from_batch_scaling(d)
    modelled = [f for f in got if f.modelled]
    assert [(f.global_batch, f.frames) for f in modelled] == [(1024, 41e6)]
    assert modelled[0].source == "noise scale along gb256-sqrt, whole loss"
    assert [f.global_batch for f in got if not f.modelled] == [256]
