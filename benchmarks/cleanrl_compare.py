"""Gorila mode against CleanRL's `dqn_atari`, side by side: agent steps/s and updates/s at the same replay ratio.

    python -m benchmarks.cleanrl_compare --cleanrl PATH [--cleanrl-python PY] [--cleanrl-threads default,1]
        [--rounds 2] [--seconds 60] [--warmup 15] [--env breakout] [--variant NAME=FLAGS ...] [--out DIR]
        [-- MORE ba3c.train FLAGS]

PATH is a CleanRL checkout (the folder holding `cleanrl/dqn_atari.py` and `cleanrl_utils/`; e.g. a clone of
github.com/vwxyzjn/cleanrl) and PY the Python of an environment with its Atari dependencies (CleanRL pins
gymnasium 0.29.1, ale-py 0.8.1 with shimmy, torch, tyro, tensorboard, opencv-python). Nothing of CleanRL is
copied here: its script runs unchanged as a child process. ale-py 0.8.1 ships no ROMs (CleanRL downloads
them with AutoROM); the child is pointed at the ROMs inside this environment's ale-py wheel through ale-py's
own `ALE_PY_ROM_DIR`.

Both play the same game with the same settings where they matter for speed: one update of 32 samples
every 4 agent steps (replay ratio 8), a replay of --replay-size transitions, learning from --learning-starts
agent steps, and epsilon already at its end value (0.01) when learning starts, so that both act greedily
through the network on 99% of the steps in the window, as for 90% of a CleanRL run. Differences that stay:
CleanRL plays one emulator and one forward pass per step (its script refuses more), ba3c's actor 8
emulators and one forward pass per 8 (its defaults); CleanRL uses the MSE loss, ba3c Huber.

The contestants run one at a time, alternated (A, B, C, A, B, C, ...) for --rounds rounds, so a change in
the machine's load shows in every contestant's numbers. CleanRL runs as shipped (torch's default threads:
one per core) and/or with OMP_NUM_THREADS=N (--cleanrl-threads; torch's OpenMP threads spin-wait for each
other, which costs much on a loaded machine); ba3c is compared with the fastest CleanRL of each round, and
--variant adds ba3c runs with other flags (a change measured before and after in one invocation).

Measured: CleanRL prints `SPS:` at every multiple of 100 agent steps once it trains; each line is
timestamped as it arrives and the window is the lines after --warmup seconds of training. ba3c's rate
comes from its progress.csv rows with updates > 0, after the same warm-up. Updates/s: CleanRL makes one
per 4 agent steps, ba3c counts its own. CPU seconds of each process over its window (from /proc) give the
cores used and the agent steps per CPU-second. Writes DIR/cleanrl-compare.json and .png
(DIR: benchmarks/results/throughput).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from measure import harness

TRAIN_EVERY, BATCH = 4, 32  # CleanRL dqn_atari's train_frequency and batch_size (ba3c's Gorila defaults too)
SPS_EVERY = 100  # CleanRL prints SPS when global_step % 100 == 0, past learning_starts


@dataclass
class Stint:
    """One contestant's run in one round: rates over its steady window."""
    name: str
    round: int
    agent_steps_per_s: float = float("nan")
    updates_per_s: float = float("nan")
    cores_used: float = float("nan")  # CPU seconds of the process per wall second, over the window
    window_s: float = 0.0
    startup_s: float = 0.0  # launch to its first update
    load_avg: list[float] = field(default_factory=list)  # at the end of the stint
    command: str = ""
    error: str = ""

    @property
    def steps_per_cpu_s(self) -> float:
        return self.agent_steps_per_s / self.cores_used


def cleanrl_sps_steps(learning_starts: int, count: int) -> list[int]:
    """The agent steps at which CleanRL prints its first `count` SPS lines: the multiples of 100 (which are
    multiples of its train frequency 4) above learning_starts."""
    first = (learning_starts // SPS_EVERY + 1) * SPS_EVERY
    return [first + SPS_EVERY * i for i in range(count)]


def window_rate(times: Sequence[float], steps: Sequence[float], warmup_s: float) -> tuple[float, float, int, int]:
    """(steps per second, window seconds, first index, last index) over the samples from `warmup_s` after the
    first one to the last; nan if fewer than two samples remain."""
    if not times:
        return float("nan"), 0.0, 0, 0
    first = next((i for i, t in enumerate(times) if t >= times[0] + warmup_s), len(times))
    last = len(times) - 1
    if last <= first or times[last] <= times[first]:
        return float("nan"), 0.0, first, last
    span = times[last] - times[first]
    return (steps[last] - steps[first]) / span, span, first, last


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


def rom_dir() -> str:
    """The ROM folder of this environment's ale-py (0.9 and later ship the ROMs in the wheel)."""
    spec = importlib.util.find_spec("ale_py")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("cleanrl_compare: ale-py is not installed in this environment")
    return os.path.join(list(spec.submodule_search_locations)[0], "roms")


def run_cleanrl(args: argparse.Namespace, name: str, rnd: int, threads: int | None) -> Stint:
    """CleanRL's dqn_atari.py, unchanged, until its SPS lines span --warmup + --seconds."""
    env_id = {"breakout": "BreakoutNoFrameskip-v4", "pong": "PongNoFrameskip-v4"}[args.env]
    total = 10**7  # the exploration fraction below ends epsilon's decay at learning_starts
    cmd = [args.cleanrl_python, os.path.join(args.cleanrl, "cleanrl", "dqn_atari.py"), "--env-id", env_id,
           "--no-cuda", "--total-timesteps", str(total), "--learning-starts", str(args.learning_starts),
           "--exploration-fraction", repr(args.learning_starts / total), "--buffer-size", str(args.replay_size),
           "--seed", str(rnd + 1)]
    env = dict(os.environ, PYTHONPATH=args.cleanrl, PYTHONUNBUFFERED="1", ALE_PY_ROM_DIR=rom_dir())
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    st = Stint(name, rnd, command=" ".join(cmd) + (f"  (OMP_NUM_THREADS={threads})" if threads else ""))
    work = tempfile.mkdtemp(prefix="ba3c-cleanrl-")  # CleanRL writes runs/ (tensorboard) into its cwd
    times: list[float] = []
    cpu: list[float] = []
    tail: list[str] = []
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("SPS:"):
                times.append(time.time())
                cpu.append(harness.proc_cpu_seconds(proc.pid))
            tail[:] = (tail + [line])[-20:]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            if times and times[-1] - times[0] >= args.warmup + args.seconds:
                break
            if not times and time.time() - t0 > args.startup:
                st.error = f"no SPS line within {args.startup:.0f} s"
                break
    finally:
        _stop(proc)
        reader.join(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    st.load_avg = list(os.getloadavg())
    if proc.returncode not in (None, 0, -signal.SIGTERM) and not times:
        st.error = st.error or f"exit {proc.returncode}: " + "".join(tail)[-1500:]
    n = len(times)
    rate, span, i, j = window_rate(times, cleanrl_sps_steps(args.learning_starts, n), args.warmup)
    st.agent_steps_per_s, st.updates_per_s, st.window_s = rate, rate / TRAIN_EVERY, span
    st.startup_s = (times[0] - t0) if times else float("nan")
    if span > 0:
        st.cores_used = (cpu[j] - cpu[i]) / span
    elif not st.error:
        st.error = "too few SPS lines; raise --seconds or --startup:\n" + "".join(tail)[-1500:]
    return st


def run_ba3c(args: argparse.Namespace, name: str, rnd: int, extra: list[str]) -> Stint:
    """`python -m ba3c.train --algo gorila`, one rank, until its rows with updates span --warmup + --seconds."""
    tmp = tempfile.mkdtemp(prefix="ba3c-gorila-compare-")
    run_dir = os.path.join(tmp, "run")
    cmd = harness.train_command("--algo", "gorila", "--env", args.env, "--dist", "none", "--run-dir", run_dir,
                                "--total-frames", str(10**10), "--checkpoint-interval-min", "1000",
                                "--learning-starts", str(args.learning_starts),
                                "--eps-decay-steps", str(args.learning_starts), "--replay-size",
                                str(args.replay_size), "--seed", str(rnd + 1), *extra)
    st = Stint(name, rnd, command=" ".join(["python", *cmd[1:]]))

    def training(rows: list[harness.Row]) -> list[harness.Row]:
        return [r for r in rows if float(r.get("updates") or 0) > 0]

    def enough(rows: list[list[harness.Row]]) -> bool:
        return harness.logged_seconds(training(rows[0])) >= args.warmup + args.seconds

    try:
        run = harness.launch(harness.TrainerJob(cmd, [run_dir], os.path.join(tmp, "trainer.log"), poll_s=0.5,
                                                startup_timeout_s=args.startup,
                                                run_timeout_s=args.startup + args.warmup + args.seconds),
                             enough)
        rows = training(run.rows[0])
        t = [float(r["time_s"]) for r in rows]
        rate, span, i, j = window_rate(t, [float(r["frames"]) / 4 for r in rows], args.warmup)
        st.agent_steps_per_s, st.window_s = rate, span
        if span > 0:
            st.updates_per_s = (float(rows[j]["updates"]) - float(rows[i]["updates"])) / span
            st.cores_used = (float(rows[j]["cpu_s"]) - float(rows[i]["cpu_s"])) / span
            st.startup_s = (run.startup_s or 0.0) + t[0] - float(run.rows[0][0]["time_s"])
        else:
            st.error = f"{run.outcome}, exit {run.returncode}: too few rows with updates\n{run.log_tail[-1500:]}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    st.load_avg = list(os.getloadavg())
    return st


def plot(stints: list[Stint], summary: dict, path: str) -> None:
    plt = harness.pyplot()
    names = list(dict.fromkeys(s.name for s in stints))
    rounds = sorted({s.round for s in stints})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        for ax, attr in zip(axes, ("agent_steps_per_s", "steps_per_cpu_s")):
            vals = [next((getattr(s, attr) for s in stints if s.name == name and s.round == r), float("nan"))
                    for r in rounds]
            bars = ax.bar([r + k * width for r in rounds], vals, width, label=name)
            ax.bar_label(bars, fmt="{:,.0f}", fontsize=7)
    axes[0].set_ylabel("agent steps per second (wall)")
    axes[1].set_ylabel("agent steps per CPU-second")
    for ax in axes:
        ax.set_xticks([r + 0.4 - width / 2 for r in rounds], [f"round {r + 1}" for r in rounds])
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{summary['env']}, one update of 32 per 4 agent steps: ba3c Gorila / best CleanRL = "
                 f"{summary['ratio_wall_median']:.2f}x (wall), {summary['ratio_per_cpu_s_median']:.2f}x (per CPU-s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize(stints: list[Stint], env: str) -> dict:
    """Per round: ba3c against the faster CleanRL variant; medians over rounds."""
    rows = []
    for r in sorted({s.round for s in stints}):
        theirs = [s for s in stints if s.round == r and s.name.startswith("cleanrl") and not s.error]
        if not theirs:
            continue
        best = max(theirs, key=lambda s: s.agent_steps_per_s)
        best_cpu = max(theirs, key=lambda s: s.steps_per_cpu_s)
        for ours in (s for s in stints if s.round == r and s.name.startswith("ba3c") and not s.error):
            rows.append({"round": r, "ba3c": ours.name, "ba3c_steps_per_s": ours.agent_steps_per_s,
                         "ba3c_updates_per_s": ours.updates_per_s, "cleanrl_best": best.name,
                         "cleanrl_steps_per_s": best.agent_steps_per_s, "cleanrl_updates_per_s": best.updates_per_s,
                         "ratio_wall": ours.agent_steps_per_s / best.agent_steps_per_s,
                         "ratio_per_cpu_s": ours.steps_per_cpu_s / best_cpu.steps_per_cpu_s})

    def median(name: str, key: str) -> float:
        v = sorted(x[key] for x in rows if x["ba3c"] == name)
        return float("nan") if not v else (v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2)

    names = list(dict.fromkeys(x["ba3c"] for x in rows))
    medians = {n: {"ratio_wall": median(n, "ratio_wall"), "ratio_per_cpu_s": median(n, "ratio_per_cpu_s")}
               for n in names}
    first = medians.get("ba3c-gorila", {"ratio_wall": float("nan"), "ratio_per_cpu_s": float("nan")})
    return {"env": env, "rounds": rows, "medians": medians, "ratio_wall_median": first["ratio_wall"],
            "ratio_per_cpu_s_median": first["ratio_per_cpu_s"], "target": 1.5}


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cleanrl", required=True, help="a CleanRL checkout (holds cleanrl/dqn_atari.py)")
    p.add_argument("--cleanrl-python", default=sys.executable, help="the Python of CleanRL's environment")
    p.add_argument("--env", choices=("breakout", "pong"), default="breakout")
    p.add_argument("--rounds", type=int, default=2, help="rounds of A, B, C alternation")
    p.add_argument("--seconds", type=float, default=60.0, help="measured window of each stint, after --warmup")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds of training dropped before each window")
    p.add_argument("--startup", type=float, default=600.0, help="cap on launch to first update, seconds")
    p.add_argument("--learning-starts", type=int, default=2000, help="agent steps before the first update (both)")
    p.add_argument("--replay-size", type=int, default=100_000, help="replay transitions (both)")
    p.add_argument("--cleanrl-threads", default="default,1",
                   help="CleanRL variants by torch threads: 'default' (as shipped: one per core) and/or numbers "
                        "(OMP_NUM_THREADS); comma list")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                   help="also run ba3c with these extra ba3c.train flags (repeatable; before/after comparisons), "
                        "e.g. --variant 'intra1=--intra-op-threads 1'")
    p.add_argument("--out", default=os.path.join(harness.RESULTS, "throughput"))
    p.add_argument("--name", default="cleanrl-compare", help="output file stem")
    args, extra = p.parse_known_args(argv)
    if not all(t == "default" or t.isdigit() and int(t) > 0 for t in args.cleanrl_threads.split(",") if t):
        p.error(f"--cleanrl-threads {args.cleanrl_threads}: expected 'default' and/or positive numbers, e.g. default,1")
    for v in args.variant:
        if "=" not in v or not v.partition("=")[0]:
            p.error(f"--variant {v}: expected NAME=FLAGS, e.g. 'intra1=--intra-op-threads 1'")
    script = os.path.join(args.cleanrl, "cleanrl", "dqn_atari.py")
    if not os.path.isfile(script):
        p.error(f"--cleanrl {args.cleanrl}: no cleanrl/dqn_atari.py there; give the folder of a CleanRL checkout")
    if shutil.which(args.cleanrl_python) is None and not os.path.isfile(args.cleanrl_python):
        p.error(f"--cleanrl-python {args.cleanrl_python}: not found")
    args.cleanrl = os.path.abspath(args.cleanrl)
    return args, [a for a in extra if a != "--"]  # after `--`: more ba3c.train flags


def main(argv: list[str] | None = None) -> int:
    args, extra = parse(argv)
    harness.exit_on_sigterm()
    os.makedirs(args.out, exist_ok=True)
    contestants: list[tuple[str, int | None | list[str]]] = [
        ("cleanrl", None) if t == "default" else (f"cleanrl-omp{int(t)}", int(t))
        for t in args.cleanrl_threads.split(",") if t]
    contestants.append(("ba3c-gorila", []))
    contestants += [(f"ba3c-{v.partition('=')[0]}", v.partition("=")[2].split()) for v in args.variant]
    stints: list[Stint] = []
    out = {"machine": harness.machine(), "date": harness.now(), "settings": {
        k: getattr(args, k) for k in ("env", "rounds", "seconds", "warmup", "learning_starts", "replay_size")},
        "ba3c_extra_flags": extra, "cleanrl_checkout": args.cleanrl,
        "command": " ".join(["python", "-m", "benchmarks.cleanrl_compare",
                             *(argv if argv is not None else sys.argv[1:])]),
        "method": " ".join((__doc__ or "").split("\n\n", 2)[2].split())}
    json_path = os.path.join(args.out, f"{args.name}.json")
    for rnd in range(args.rounds):
        for name, how in contestants:
            print(f"cleanrl_compare: round {rnd + 1}, {name} ...", flush=True)
            st = (run_ba3c(args, name, rnd, extra + how) if isinstance(how, list)
                  else run_cleanrl(args, name, rnd, how))
            stints.append(st)
            print(f"    {st.agent_steps_per_s:.1f} agent steps/s, {st.updates_per_s:.2f} updates/s, "
                  f"{st.cores_used:.2f} cores, {st.steps_per_cpu_s:.1f} steps/CPU-s, window {st.window_s:.0f} s, "
                  f"load {st.load_avg[0]:.1f}" + (f"\n    error: {st.error}" if st.error else ""), flush=True)
            out["stints"] = [dict(asdict(s), steps_per_cpu_s=s.steps_per_cpu_s) for s in stints]
            out["summary"] = summarize(stints, args.env)
            with open(json_path, "w") as fh:  # after every stint: an interrupted run keeps what it measured
                json.dump(out, fh, indent=1)
    summary = out["summary"]
    for row in summary["rounds"]:
        print(f"round {row['round'] + 1}: {row['ba3c']} {row['ba3c_steps_per_s']:.1f} vs {row['cleanrl_best']} "
              f"{row['cleanrl_steps_per_s']:.1f} agent steps/s: {row['ratio_wall']:.2f}x wall, "
              f"{row['ratio_per_cpu_s']:.2f}x per CPU-second")
    for name, m in summary["medians"].items():
        print(f"{name}: median ratio {m['ratio_wall']:.2f}x (wall), {m['ratio_per_cpu_s']:.2f}x (per CPU-second); "
              "target 1.5x")
    plot(stints, summary, os.path.join(args.out, f"{args.name}.png"))
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
