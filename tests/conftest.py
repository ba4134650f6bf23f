"""Shared helpers: run the trainer (or mpirun) as real subprocesses from the repository root."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # the venv's mpirun
    env["PYTHONPATH"] = str(ROOT)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_mpi_yield_when_idle="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    return env


def run_train(args: list[str], timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "ba3c.train", *args], cwd=ROOT, env=subprocess_env(),
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"trainer exited {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


def mpirun(np_: int, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "mpirun"), "-np", str(np_), "--oversubscribe", "--bind-to", "none", sys.executable, *args]
    p = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"mpirun exited {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


@pytest.fixture
def tiny_cartpole() -> list[str]:
    return ["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20",
            "--log-interval-s", "0.5", "--stats-interval-updates", "5"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tiers first (a stable sort): two pytest-xdist workers (make test) then finish together instead
    of one running a minutes-long test alone at the end."""
    slow = ("learning", "mpi", "slurm", "root", "slow")
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in slow))
