"""studies/exchange (python -m studies.exchange): the timeline reading on a hand-made trace, and `--quick` end to end
(no speed assertions: numbers here are noisy)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env
from studies.exchange.exchange import timeline_excerpt

DENSE = "HorovodAllreduce_gradient_tape_nature_1_dense_1_MatMul_MatMul_1_0"
CONV = "HorovodAllreduce_gradient_tape_nature_1_conv2d_1_convolution_Conv2DBackpropFilter_0"


def trace(dense_ready_us: float, conv_ready_us: float) -> list[dict]:
    """One update as Horovod's rank 0 writes it: per tensor a NEGOTIATE span (from rank 0's readiness to
    both ranks') then an ALLREDUCE span; times in microseconds."""
    events: list[dict] = []
    for pid, (name, ready) in enumerate(((DENSE, dense_ready_us), (CONV, conv_ready_us)), start=1):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
        events += [{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": ready, "pid": pid},
                   {"ph": "X", "name": "1", "ts": ready + 50, "pid": pid, "dur": 0},
                   {"ph": "E", "ts": ready + 100, "pid": pid},
                   {"ph": "B", "name": "ALLREDUCE", "ts": ready + 150, "pid": pid},
                   {"ph": "B", "name": "MPI_ALLREDUCE", "ts": ready + 160, "pid": pid},
                   {"ph": "E", "ts": ready + 5000, "pid": pid},
                   {"ph": "E", "ts": ready + 5100, "pid": pid}]
    return events


def test_timeline_excerpt_tells_overlap_from_none():
    early = timeline_excerpt(trace(1_000_000, 1_020_000))["per-tensor"][-1]  # dense ready 20 ms before the last conv
    assert early["dense_allreduce_began_during_backprop"] is True
    assert early["rank0_last_gradient_ready_ms"] == 20.0
    assert early["dense_kernel_allreduce_start_ms"] == 0.15
    assert early["last_allreduce_end_ms"] == 25.1
    assert [t["tensor"] for t in early["tensors"]] == ["nature_1_dense_1_MatMul_MatMul_1_0",
                                                       "nature_1_conv2d_1_convolution_Conv2DBackpropFilter_0"]
    late = timeline_excerpt(trace(1_020_000, 1_000_000))["per-tensor"][-1]  # dense ready after the conv: no overlap
    assert late["dense_allreduce_began_during_backprop"] is False
    assert "grouped" not in timeline_excerpt(trace(0, 0))


@pytest.mark.mpi
def test_exchange_quick(tmp_path):
    p = subprocess.run([sys.executable, "-m", "studies.exchange", "--quick", "--out", str(tmp_path)],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((tmp_path / "exchange.json").read_text())
    assert set(res["paths_summary"]) == {"2"}  # --quick: 2 inter-op threads only
    s = res["paths_summary"]["2"]
    assert set(s) == {"none", "grouped", "per-tensor", "mpi", "mpi-per-tensor"}, s
    assert s["none"]["vs_control"]["median"] == 1.0 and s["none"]["exposed_ms"]["median"] == 0.0
    for v in ("grouped", "per-tensor", "mpi", "mpi-per-tensor"):  # an exchange takes some time, and it was measured
        assert s[v]["step_ms"]["median"] > 0 and s[v]["exposed_ms"]["median"] > 0
    p_in = res["projection_input"]
    assert p_in["exposed_fraction_per_tensor"] > 0 and p_in["exposed_ms_grouped"] > 0
    assert set(p_in["exposed_fraction_vs_grouped"]) == {"per-tensor"}  # --quick measures no fp16 variant
    assert p_in["scaling_exposed_arg"] == f"per-tensor={min(p_in['exposed_fraction_per_tensor'], 1.0):.2f}"
    ex = res["timeline"]["excerpt"]
    assert set(ex) == {"grouped", "per-tensor"}
    per_tensor = ex["per-tensor"][-1]
    # the Nature CNN's 12 gradients (6 layers' kernels and biases), each with its own op, the dense kernel's among them
    assert len(per_tensor["tensors"]) == 12 and "dense_allreduce_began_during_backprop" in per_tensor
    assert len(ex["grouped"][-1]["tensors"]) == 12
    assert (tmp_path / "exchange.png").stat().st_size > 1000


def _trainer_runs(variant_fps: float) -> list[dict]:
    """One round: control, per-tensor, control, frames/s as given (no stage split)."""
    return [{"seq": i, "round": 0, "variant": v, "frames_per_s": fps}
            for i, (v, fps) in enumerate((("control", 1000.0), ("per-tensor", variant_fps), ("control", 1000.0)))]


def test_analyze_only_merges_files_later_parts_replace_earlier(tmp_path):
    """`--analyze-only A,B`: B's parts replace A's (the trainer measured again), A's other parts stay, and
    each part says which file it came from."""
    from studies.exchange.exchange import main

    machine = {"cores": 2, "cpu": "test"}
    first = {"machine": machine, "date": "d1", "parts": ["trainer", "timeline"], "trainer": _trainer_runs(500.0),
             "timeline": {"excerpt": {}}}
    again = {"machine": machine, "date": "d2", "parts": ["trainer"], "trainer": _trainer_runs(900.0)}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(first))
    b.write_text(json.dumps(again))
    assert main(["--analyze-only", f"{a},{b}", "--out", str(tmp_path / "out")]) == 0
    res = json.loads((tmp_path / "out" / "exchange.json").read_text())
    assert res["trainer_summary"]["per-tensor"]["vs_control"]["median"] == 0.9
    assert res["timeline"] == {"excerpt": {}}
    assert res["measured_in"]["trainer"]["file"] == "b.json" and res["measured_in"]["timeline"]["file"] == "a.json"


def test_projection_input_gives_each_variants_exposed_share_of_grouped():
    """Shares over float32 grouped's exposed time; one above 1 goes to scaling.py --exposed as 1 (no better than
    sync)."""
    from studies.exchange.exchange import projection_input

    def ms(x: float) -> dict:
        return {"exposed_ms": {"median": x, "min": x, "max": x, "n": 1}}

    res = {"paths_summary": {"2": {"none": ms(0.0), "grouped": ms(8.0), "per-tensor": ms(10.0),
                                   "grouped-fp16": ms(6.0), "per-tensor-fp16": ms(4.0)}}}
    p = projection_input(res)
    assert p["exposed_fraction_vs_grouped"] == {"per-tensor": 1.25, "grouped-fp16": 0.75, "per-tensor-fp16": 0.5}
    assert p["scaling_exposed_arg"] == "per-tensor=1.00,grouped-fp16=0.75,per-tensor-fp16=0.50"
    assert projection_input({"paths_summary": {"2": {"grouped": ms(8.0)}}}) == {}  # no per-tensor: nothing to project
