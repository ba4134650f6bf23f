"""`python -m benchmarks.scaling --quick` end to end (no speed assertions: numbers here are noisy).

No start-up assertions either: each run's start-up has its own generous cap (`--startup`), apart
from its measurement window, so a loaded machine slows this test down instead of failing it."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env


@pytest.mark.mpi
def test_scaling_quick(tmp_path):
    # the core layout only: the fat one is the same runs with more threads per rank
    p = subprocess.run([sys.executable, "-m", "benchmarks.scaling", "--quick",
                        "--layouts", "core", "--out", str(tmp_path)],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((tmp_path / "scaling.json").read_text())
    measured = {(m["ranks"], m["layout"]): m for m in res["measured"]}
    assert {(1, "core"), (2, "core")} <= set(measured)
    for m in measured.values():
        assert m["frames_per_s"] > 0 and math.isfinite(m["efficiency"]), m
        assert m["ms_per_update_rank0"]["train"] > 0  # the trainer's own stage timers came back
    assert measured[(1, "core")]["efficiency"] == 1.0
    # the no-exchange control ran as two separate single-rank runs and the exchange's cost is reported
    assert (2, "independent") in measured and measured[(2, "independent")]["exchange"] == "none"
    assert 0 < measured[(2, "core")]["efficiency_vs_control"] < 5
    assert res["allreduce"] and res["allreduce"][0]["ranks"] == 2
    assert {r["backend"] for r in res["allreduce"][0]["rows"]} == {"horovod", "mpi"}
    assert res["fit"]["modelled"] and res["fit"]["allreduce"]["horovod"]["bandwidth_bytes_per_s"] > 0
    proj = res["projection"]
    assert all(p["modelled"] for p in proj)
    assert any(p["nodes"] == 64 and p["global_batch"] == 2048 for p in proj)
    # the one node model (the planner's too), its inputs labelled; this run's collection cost and Horovod fit in it
    node = res["node_model"]
    assert all(node[k]["label"] in ("measured", "fitted", "assumed") and node[k]["source"]
               for k in ("fixed_s", "serial", "train_s_per_sample", "collect_s_per_sample_core", "exchange_overhead_s"))
    assert node["exchange_overhead_s"]["value"] == res["fit"]["allreduce"]["horovod"]["overhead_s"]
    assert {p["network"] for p in proj} == {"ib100", "10gbe", "10gbe-nominal"}
    assert (tmp_path / "scaling.png").stat().st_size > 5000
    assert "PROJECTED 64 nodes" in p.stdout
    # each run's start-up was measured apart from its window
    assert all(m["startup_s"] > 0 and m["outcome"] == "stopped" for m in measured.values())

    # --analyze-only re-reads what it wrote (and files in the older layout, the committed results)
    for src in (tmp_path / "scaling.json", ROOT / "benchmarks" / "results" / "scaling" / "scaling.json"):
        q = subprocess.run([sys.executable, "-m", "benchmarks.scaling", "--analyze-only", str(src),
                            "--out", str(tmp_path / "again")], cwd=ROOT, env=subprocess_env(),
                           capture_output=True, text=True, timeout=120)
        assert q.returncode == 0, q.stderr[-3000:]
        again = json.loads((tmp_path / "again" / "scaling.json").read_text())
        assert "PROJECTED 64 nodes" in q.stdout and again["node_model"]["threads"] >= 1
        assert again["measured"] == sorted(json.loads(src.read_text())["measured"],
                                           key=lambda m: (m["layout"], m["ranks"]))


def test_plan_runs_each_layout_then_the_control(monkeypatch):
    from benchmarks import scaling
    from measure import harness

    monkeypatch.setattr(harness, "cores", lambda: 4)
    args = scaling.parse(["--ranks", "1,2", "--layouts", "core,fat", "--control-ranks", "2"])[1]
    got = [(s.ranks, s.layout, s.threads) for s in scaling.plan(args, [1, 2])]
    assert got == [(1, "core", 1), (1, "fat", 4), (2, "core", 1), (2, "fat", 2), (2, "independent", 1)]
