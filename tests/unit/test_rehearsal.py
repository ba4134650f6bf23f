"""--rehearse-ranks K: one process plays a K-rank run's data; checked against a real `mpirun -np 2` run."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from ba3c.batching import global_batch, scaled_lr
from ba3c.config import Config
from ba3c.resources import check_memory
from conftest import mpirun, run_train

GIB = 1 << 30
COMMON = ["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20",
          "--total-frames", "12000", "--seed", "3", "--lr-scaling", "sqrt", "--lr-ref-batch", "20",
          "--warmup-updates", "60", "--stats-interval-updates", "5", "--log-interval-s", "0.001",
          "--intra-op-threads", "1"]


def _read(run) -> tuple[dict, list[dict[str, str]]]:
    meta = json.loads((run / "meta.json").read_text())
    with open(run / "progress.csv", newline="") as fh:
        return meta, list(csv.DictReader(fh))


@pytest.mark.mpi
def test_rehearsal_matches_a_real_two_rank_run(tmp_path):
    mpirun(2, ["-m", "ba3c.train", *COMMON, "--run-dir", str(tmp_path / "real")], timeout=300)
    p = run_train([*COMMON, "--rehearse-ranks", "2", "--run-dir", str(tmp_path / "rehearsal")], timeout=300)
    assert "rehearsing 2 ranks" in p.stdout
    real_meta, real = _read(tmp_path / "real")
    reh_meta, reh = _read(tmp_path / "rehearsal")
    assert real_meta["ranks"] == 2 and reh_meta["ranks"] == 1 and reh_meta["rehearse_ranks"] == 2
    # the same global batch and learning rate, and frames counted per update as the 2-rank run counts them
    assert real_meta["global_batch"] == reh_meta["global_batch"] == 40
    assert real_meta["lr_effective"] == reh_meta["lr_effective"]
    assert all(real_meta[k] == reh_meta[k] for k in ("final_update", "final_frames"))
    for rows in (real, reh):
        assert all(int(r["frames"]) == 40 * int(r["updates"]) for r in rows)
    # the warm-up schedule: the same lr at the same update
    lr_real = {int(r["updates"]): float(r["lr"]) for r in real}
    lr_reh = {int(r["updates"]): float(r["lr"]) for r in reh}
    common = sorted(set(lr_real) & set(lr_reh))
    assert len(common) >= 5 and any(lr_real[u] < real_meta["lr_effective"] for u in common)
    assert [lr_real[u] for u in common] == [lr_reh[u] for u in common]
    # each update sees data of the same age: the rehearsal's policy lag is no larger than the real run's,
    # averaged over the run (seen here: about 2.0-2.2 updates against 3.2-3.4 for the two real ranks)
    lag_real = np.mean([float(r["policy_lag"]) for r in real])
    lag_reh = np.mean([float(r["policy_lag"]) for r in reh])
    print("policy lag: rehearsal", lag_reh, "real", lag_real)
    assert 0 <= lag_reh <= lag_real + 0.5, (lag_reh, lag_real)


def test_rehearsal_lr_and_batch_are_the_k_rank_runs():
    cfg = Config().replace(rehearse_ranks=32, train_batch=64, lr=5e-4, lr_scaling="sqrt", lr_ref_batch=64)
    assert global_batch(cfg, 1) == 2048 == global_batch(Config().replace(train_batch=64), 32)
    assert scaled_lr(cfg, 1) == scaled_lr(Config().replace(train_batch=64, lr=5e-4, lr_scaling="sqrt",
                                                            lr_ref_batch=64), 32)
    assert global_batch(cfg, 2) == 4096  # 2 real ranks each rehearsing 32


def test_64_ranks_simulators_fit_a_24_gb_machine():
    """The default Pong rank, 64 times over in one process (global batch 64 x 64 = 4096)."""
    est = check_memory(Config().replace(rehearse_ranks=64), "atari", 4 * 84 * 84, "nature", 1, 24 * GIB)
    assert est.emulators == 64 * 32 * int(1.5 * (1 << 20))
    assert est.total < 0.9 * 24 * GIB
