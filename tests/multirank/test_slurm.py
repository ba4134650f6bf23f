"""launch/train.sbatch under a real one-node SLURM on localhost (munged, slurmctld, slurmd as root).

Nothing is installed here: `launch/install_slurm_local.sh` does that (CI calls it before
`make test`). Without the SLURM and munge daemons, or without root, the tests are skipped.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SBATCH_SCRIPT = ROOT / "launch" / "train.sbatch"
DAEMON_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
TINY = ["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20", "--dist", "mpi",
        "--log-interval-s", "1"]

# one SLURM cluster per module: under pytest-xdist both tests run in the same worker (--dist loadgroup)
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]


def _daemon(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *DAEMON_DIRS])
    return shutil.which(name, path=path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_cpus(slurmd: str) -> int:
    """CPUs that `slurmd -C` reports for this machine (at least 2: the tests run 2 tasks)."""
    out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"\bCPUs=(\d+)", out)
    return max(2, int(m.group(1)) if m else 2)


class Slurm:
    """A one-node SLURM cluster whose files all live in one temporary directory."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = str(tmp / "slurm.conf")
        # Jobs inherit this environment (sbatch --export=ALL): the venv's mpirun, root for Open MPI.
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", ""), *DAEMON_DIRS])
        self.env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMPI_MCA_mpi_yield_when_idle="1", TF_CPP_MIN_LOG_LEVEL="2",
                        BA3C_PYTHON=sys.executable)
        for k in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_"))]:
            if k != "SLURM_CONF":
                del self.env[k]  # an enclosing real allocation must not leak into ours
        self.procs: list[subprocess.Popen] = []

    def write_config(self, cpus: int) -> None:
        self.cpus, t = cpus, self.tmp
        for d in ("state", "spool", "munge"):
            (t / d).mkdir(mode=0o700)
        key = t / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        conf = f"""\
ClusterName=ba3ctest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
# Own munged socket; a requeued job may start again after cred_expire seconds (default 120).
AuthInfo=socket={t}/munge/munge.socket,cred_expire=10
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool
SlurmctldPidFile={t}/slurmctld.pid
SlurmdPidFile={t}/slurmd.pid
SlurmctldLogFile={t}/slurmctld.log
SlurmdLogFile={t}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# Main scheduling loop every 2 s (default 60): a requeued job becomes eligible on a timer, not an event.
SchedulerParameters=sched_interval=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""
        (t / "slurm.conf").write_text(conf)

    def start(self) -> None:
        t = self.tmp
        log = open(t / "daemons.log", "ab")
        self.procs.append(subprocess.Popen(
            [_daemon("munged"), "-F", "--force", f"--socket={t}/munge/munge.socket", f"--key-file={t}/munge/munge.key",
             f"--pid-file={t}/munge/munged.pid", f"--log-file={t}/munge/munged.log", f"--seed-file={t}/munge/seed"],
            env=self.env, stdout=log, stderr=log))
        self._wait_for(lambda: (t / "munge" / "munge.socket").exists(), 20, "munged socket")
        self.procs.append(subprocess.Popen([_daemon("slurmctld"), "-D", "-c", "-i"], env=self.env, stdout=log,
                                           stderr=log))
        self._wait_for(lambda: self.run("scontrol", "ping", check=False).returncode == 0, 30, "slurmctld")
        self.procs.append(subprocess.Popen([_daemon("slurmd"), "-D", "-N", "localhost"], env=self.env, stdout=log,
                                           stderr=log))
        self._wait_for(lambda: re.search(r"State=(IDLE|MIXED|ALLOCATED)\b",
                                         self.run("scontrol", "show", "node", "localhost", check=False).stdout),
                       60, "slurmd to register an idle node")

    def _wait_for(self, ready, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode} while waiting for {what}\n"
                                       f"{self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for name in ("daemons.log", "slurmctld.log", "slurmd.log", "munge/munged.log"):
            p = self.tmp / name
            if p.exists():
                out.append(f"--- {name} (tail)\n" + "\n".join(p.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(out)

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        p = subprocess.run(cmd, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr}{p.stdout}")
        return p

    def sbatch(self, *args: str) -> str:
        out = self.run("sbatch", "--parsable", *args).stdout.strip()
        return out.split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, ExitCode, Restarts, ...); empty once forgotten."""
        p = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        return dict(f.split("=", 1) for f in p.stdout.split() if "=" in f)

    def wait_state(self, job_id: str, states: set[str], timeout: float, log: Path) -> dict[str, str]:
        end = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < end:
            info = self.job(job_id)
            if info.get("JobState") in states:
                return info
            time.sleep(1)
        raise AssertionError(f"job {job_id} not in {states} after {timeout:.0f}s: {info.get('JobState')}\n"
                             f"{read(log)[-4000:]}\n{self.logs()}")

    def stop(self) -> None:
        # Cancel jobs first: slurmstepd and the job's processes outlive slurmd otherwise.
        try:
            self.run("scancel", "--partition=test", check=False)
            end = time.monotonic() + 30
            while time.monotonic() < end and self.run("squeue", "-h", check=False).stdout.strip():
                time.sleep(0.5)
        except subprocess.TimeoutExpired:  # slurmctld is not answering: stop the daemons anyway
            pass
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else f"({path} does not exist)"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = [d for d in ("slurmctld", "slurmd", "munged", "sbatch", "scontrol") if _daemon(d) is None]
    if missing:
        pytest.skip(f"SLURM not installed ({', '.join(missing)} missing); run launch/install_slurm_local.sh as root")
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster runs its daemons as root (SlurmUser=root)")
    tmp = Path(tmp_path_factory.mktemp("slurm", numbered=True))
    cluster = Slurm(tmp)
    cluster.write_config(_node_cpus(_daemon("slurmd")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_sbatch_two_ranks(slurm, tmp_path):
    log = tmp_path / "job.out"
    t0 = time.monotonic()
    # No --run-dir: the script's default, runs/slurm-JOBID, relative to the job's working directory.
    job = slurm.sbatch("-n", "2", "--ntasks-per-node=2", f"--chdir={tmp_path}", f"--output={log}", str(SBATCH_SCRIPT),
                       *TINY, "--total-frames", "4000")
    run_dir = tmp_path / "runs" / f"slurm-{job}"
    info = slurm.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"},
                            timeout=240, log=log)
    out = read(log)
    assert info["JobState"] == "COMPLETED", f"{info}\n{out[-4000:]}"
    assert "ba3c: done:" in out, out[-4000:]
    # --exclusive gives the job the node; the script shares its CPUs between the 2 ranks.
    assert f"--intra-op-threads {slurm.cpus // 2} --env-threads {slurm.cpus // 2}" in out, out[:2000]
    for name in ("config.json", "progress.csv", "meta.json"):
        assert (run_dir / name).is_file(), name
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["ranks"] == 2
    assert meta["slurm"]["SLURM_JOB_ID"] == job
    assert meta["exit_status"] == 0
    assert list((run_dir / "checkpoints").glob("ckpt-*.npz"))
    print(f"sbatch job {job}: {time.monotonic() - t0:.0f}s")


def test_signal_requeue_resume(slurm, tmp_path):
    """USR1 to the batch shell (as --signal=B:USR1@120 sends it) -> checkpoint, exit 75, requeue, resume, finish."""
    run_dir, log = tmp_path / "run", tmp_path / "job.out"
    global_batch = 2 * 20
    total_updates = 1200  # ~15-40 s of training here: long enough to be stopped part-way, short enough to finish
    t0 = time.monotonic()
    job = slurm.sbatch("-n", "2", "--ntasks-per-node=2", f"--output={log}", str(SBATCH_SCRIPT),
                       *TINY, "--total-frames", str(total_updates * global_batch), "--run-dir", str(run_dir))
    # Signal once training is under way (a progress line), not while TensorFlow is still importing.
    end = time.monotonic() + 180
    while time.monotonic() < end and not re.search(r"^\[\s*\d", read(log), re.M):
        assert slurm.job(job).get("JobState") in {"PENDING", "CONFIGURING", "RUNNING"}, read(log)[-4000:]
        time.sleep(0.5)
    assert re.search(r"^\[\s*\d", read(log), re.M), f"no progress line after 180s\n{read(log)[-4000:]}"
    slurm.run("scancel", "--signal=USR1", "--batch", job)

    info = slurm.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"},
                            timeout=300, log=log)
    out = read(log)
    assert info["JobState"] == "COMPLETED", f"{info}\n{out[-4000:]}"
    assert int(info.get("Restarts", 0)) == 1, info
    stopped = re.search(r"stopped by signal at update ([\d,]+)", out)
    assert stopped, f"the first start did not stop on the signal\n{out[-4000:]}"
    stopped_at = int(stopped.group(1).replace(",", ""))
    assert 0 < stopped_at < total_updates
    assert "train.sbatch: trainer exited with status 75" in out and "requeueing job" in out, out[-4000:]
    assert f"job {job} restart 1:" in out and f"--resume {run_dir}" in out, out[-4000:]
    assert re.search(rf"resuming from .*ckpt-{stopped_at:010d}\.npz \(update {stopped_at:,}", out), out[-4000:]
    assert "ba3c: done:" in out, out[-4000:]

    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["ranks"] == 2 and meta["exit_status"] == 0
    assert meta["resumed_from_update"] == stopped_at
    assert meta["final_update"] == total_updates
    assert meta["final_frames"] == total_updates * global_batch
    with open(run_dir / "progress.csv") as fh:
        updates = [int(float(r["updates"])) for r in csv.DictReader(fh)]
    assert updates == sorted(updates) and updates[-1] == total_updates, updates
    assert any(u > stopped_at for u in updates) and any(u <= stopped_at for u in updates), updates
    assert (run_dir / "checkpoints" / f"ckpt-{total_updates:010d}.npz").is_file()
    print(f"sbatch job {job}: stopped at update {stopped_at}, requeued, finished: {time.monotonic() - t0:.0f}s")
