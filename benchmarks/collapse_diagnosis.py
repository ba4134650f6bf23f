"""What a policy collapse is, and whether the collapse guard undoes it (issue 14, item 3).

    python -m benchmarks.collapse_diagnosis                                   # all parts below but the last
    python -m benchmarks.collapse_diagnosis --pong-checkpoints runs/batch_scaling/gb2048-sqrt/checkpoints
    python -m benchmarks.collapse_diagnosis --probe-env boxing --probe-lrs 5e-4 --probe-seeds 0 --probe-updates 1500 \
        --guard-seeds '' --probe-learn lr_adapt=kl --name collapse-probe-boxing-kl       # a variant on Boxing
    python -m benchmarks.collapse_diagnosis --probe-env boxing --probe-lrs 5e-4 --probe-seeds 0 --probe-updates 1500 \
        --guard-seeds '' --probe-decorrelate 1783 --name collapse-probe-boxing-decorrelated  # games out of step

1. breakout: the committed Breakout run that collapsed (time_to_score-breakout-collapsed-progress.csv):
   its rows from just before the collapse to the end of that process. Stage timers are cumulative per
   process, so continuous t_env / t_predict show which rows one process wrote. And committed_runs:
   every row of the committed time-to-score runs whose (last update's) entropy is below 1e-3, with
   the rows around it and the run's medians.
2. probe: CartPole A2C (or, with --probe-env, an Atari game at the trainer's defaults; --probe-learn changes
   LearnConfig values) with ba3c's own pieces (simulator, predictor, n-step experience, Learner with
   Adam and global-norm clipping) in one thread, so it is repeatable: every update's entropy, gradient
   norm (before clipping), losses, mean |advantage|, the batch's logit gap (largest minus second
   largest logit) before and after the update, and the size of the weight step.
3. guard: the real trainer (`python -m ba3c.train`, asynchronous, as in tests/test_guard.py's collapsing
   config) for several seeds with --collapse-guard warn (report only) and rollback: did the policy
   collapse, how did the run end (its final checkpoint's score with sampled actions, 16 games: ~9 for
   a policy collapsed onto one action; its last mean-20 training return), how many rollbacks.
4. pong (optional): the checkpoints of the collapsed global-batch-2048 Pong rehearsal: logits on
   Pong frames from random play (mean logits, gap, argmax counts, entropy).
5. runs (optional, --runs NAME=RUN_DIR,...): trainer runs made separately (e.g. the same Pong config
   with --collapse-guard warn and rollback): their config, progress (updates, frames, mean entropy,
   largest gradient norm, mean-20 return, verdict) and guard events, and a plot of their entropy.

Writes benchmarks/results/collapse-diagnosis.{json,png} and, with --runs, collapse-guard-runs.png (or --out).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

from ba3c.simulators import decorrelate_games
from benchmarks import harness

BREAKOUT_CSV = os.path.join(harness.RESULTS, "time_to_score-breakout-collapsed-progress.csv")
# the trainer config of part 3 (tests/test_guard.py's COLLAPSING): CartPole at 60x the lr that learns it
GUARD_FLAGS = ["--env", "CartPole-v1", "--num-envs", "8", "--predict-batch", "8", "--train-batch", "40", "--lr", "0.06",
               "--lr-scaling", "none", "--intra-op-threads", "1", "--log-interval-s", "1", "--stats-interval-updates", "10",
               "--guard-snapshot-updates", "50", "--total-frames", "24000"]


def breakout_rows(path: str = BREAKOUT_CSV, from_update: int = 24_680) -> dict[str, Any]:
    """The rows from just before the collapse to the end, and where each process began: the stage timers
    (t_env, t_predict, ...) count from zero in every process, so a drop in t_env marks a new one (a resume)."""
    keys = ("time_s", "updates", "episodes", "return_mean20", "episode_length_mean", "policy_loss", "value_loss", "entropy",
            "grad_norm", "t_env", "t_predict", "t_queue_put_wait")
    with open(path, newline="") as fh:
        rows = [{k: float(r[k]) if r[k] else None for k in keys} for r in csv.DictReader(fh)]  # '' before any episode
    starts = [int(rows[0]["updates"])] + [int(b["updates"]) for a, b in zip(rows, rows[1:]) if b["t_env"] < a["t_env"]]
    return {"source": os.path.relpath(path, harness.ROOT), "process_first_rows_at_update": starts,
            "rows": [r for r in rows if r["updates"] >= from_update]}


def committed_collapses(pattern: str = "time_to_score-*-progress.csv", floor: float = 1e-3) -> list[dict[str, Any]]:
    """Rows with entropy below `floor` in the committed progress files: the row before, the row, and the
    rows up to the first one whose entropy is back above half the run's median."""
    import glob
    import statistics

    keys = ("updates", "frames", "episodes", "return_mean20", "episode_length_mean", "value_loss", "entropy", "grad_norm")
    out = []
    for path in sorted(glob.glob(os.path.join(harness.RESULTS, pattern))):
        with open(path, newline="") as fh:
            rows = [{k: float(r[k]) if r.get(k) else None for k in keys} for r in csv.DictReader(fh) if r.get("entropy")]
        # a kept copy may lack a column (time_to_score keeps progress.csv's main ones): no median for it
        med = {k: statistics.median(vals) if (vals := [r[k] for r in rows if r[k] is not None]) else None
               for k in ("entropy", "grad_norm", "value_loss")}
        i = 0
        while i < len(rows):
            if rows[i]["entropy"] >= floor:
                i += 1
                continue
            j = i
            while j < len(rows) and rows[j]["entropy"] < 0.5 * med["entropy"]:
                j += 1
            out.append({"source": os.path.relpath(path, harness.ROOT), "run_medians": med,
                        "recovered": j < len(rows), "rows": rows[max(0, i - 1):j + 2]})
            i = j + 1
    return out


# ---------------------------------------------------------------- part 2: the synchronous probe

def probe(lr: float, updates: int, seed: int, env: str = "CartPole-v1", progress_every: int = 0,
          learn: dict[str, Any] | None = None, decorrelate: int = 0) -> list[dict[str, Any]]:
    """A2C in one thread (no policy lag, repeatable up to thread scheduling): one record per update.
    CartPole: the mlp, 8 environments, batch 40. An Atari game: the trainer's defaults (nature model, 32
    environments, batch 64, clipped rewards), played synchronously (all 32 per prediction). `learn`: other
    LearnConfig values (e.g. clip_norm=0.1). `decorrelate` (Atari): before the first update, environment i
    plays k_i uniform random actions into a new game, k_i drawn from 0..decorrelate-1, so that games of a fixed
    length (Boxing: 1,783 agent steps) do not all end, and start, at the same step."""
    from ba3c.tfquiet import import_tensorflow_quietly

    import_tensorflow_quietly()
    from ba3c.config import LearnConfig
    from ba3c.dist import Dist
    from ba3c.experience import Experience
    from ba3c.learner import Learner
    from ba3c.model import build_model
    from ba3c.predictor import Predictor, sample_actions
    from ba3c.simulators import make_simulator, resolve_env
    from ba3c.workers import set_tensorflow_threads

    set_tensorflow_threads(1, 1)
    spec = resolve_env(env)
    atari = spec.kind == "atari"
    n = 32 if atari else 8
    cfg = LearnConfig(**{"train_batch": 64 if atari else 40, **(learn or {}), "lr": lr})
    sim = make_simulator(spec, n, n, 1, 108_000)
    model = build_model("nature" if atari else "mlp", sim.obs_shape, sim.num_actions, seed=seed)
    learner = Learner(model, cfg, Dist(), lr, 0)
    predict = Predictor(model, sim.obs_shape, sim.obs_dtype)
    exp = Experience(n, sim.obs_shape, sim.obs_dtype, cfg.n_step, cfg.gamma, cfg.train_batch, clip_rewards=atari)
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    lengths: list[int] = []

    def heads(obs: np.ndarray) -> tuple[float, float, float, int, float]:
        """The batch's mean logit gap (largest minus second largest), largest |logit|, largest |value|, and
        the action most often the argmax with the share of the batch it is the argmax on."""
        logits, values = (np.asarray(x) for x in model(obs)[:2])
        top2 = np.sort(logits, axis=1)[:, -2:]
        counts = np.bincount(np.argmax(logits, axis=1), minlength=logits.shape[1])
        return (float(np.mean(top2[:, 1] - top2[:, 0])), float(np.max(np.abs(logits))), float(np.max(np.abs(values))),
                int(np.argmax(counts)), float(np.max(counts) / len(logits)))

    steps = 0  # agent steps played by each environment (synchronous: all alike)
    try:
        b = sim.reset(seed)
        if decorrelate:
            b = decorrelate_games(sim, decorrelate, rng, seed)
        while learner.updates < updates:
            logits, values = predict(b.obs)
            actions = sample_actions(logits, rng)
            sim.send(actions)
            batches, episodes = exp.add(b, values, actions, learner.updates)
            lengths += [e.length for e in episodes]
            for tb in batches:
                before, gap_before = [w.numpy().copy() for w in model.weights], heads(tb.obs)[0]
                st = learner.train(tb)
                layer_steps = [float(np.sqrt(np.sum((w.numpy() - x) ** 2))) for w, x in zip(model.weights, before)]
                gap_after, logit_max, value_max, top_action, top_share = heads(tb.obs)
                big = int(np.argmax(layer_steps))
                out.append({"update": learner.updates, "entropy": st.entropy, "grad_norm": st.grad_norm,
                            "policy_loss": st.policy_loss, "value_loss": st.value_loss,
                            "adv_abs_mean": float(np.mean(np.abs(tb.advantages))), "logit_gap_before": gap_before,
                            "logit_gap_after": gap_after, "logit_abs_max_after": logit_max,
                            "value_abs_max_after": value_max, "argmax_action_after": top_action,
                            "argmax_share_after": top_share, "return_mean": float(np.mean(tb.returns)),
                            "sampled_action_share": float(np.max(np.bincount(tb.actions)) / len(tb.actions)),
                            "env_steps": steps, "episodes_ended": len(lengths),
                            "weight_step": float(np.sqrt(sum(x * x for x in layer_steps))),
                            "largest_layer_step": [getattr(model.weights[big], "path", model.weights[big].name),
                                                   layer_steps[big]],
                            "episode_length_mean20": float(np.mean(lengths[-20:])) if lengths else None})
                if progress_every and learner.updates % progress_every == 0:
                    r = out[-1]
                    print(f"probe {env} lr {lr:g} seed {seed}: update {r['update']}, entropy {r['entropy']:.3g}, "
                          f"gradient norm {r['grad_norm']:.3g}, logit gap {r['logit_gap_after']:.3g}", flush=True)
            b = sim.recv()
            steps += 1
    finally:
        sim.close()
    return out


def summarize_probe(rows: list[dict[str, float]], floor: float = 1e-3, burst: int = 24) -> dict[str, Any]:
    """When the batch entropy first fell below `floor`, and how the `burst` updates up to it differ from
    the updates before them: logit-gap change per update, weight step, gradient norm, value loss."""
    first = next((r for r in rows if r["entropy"] < floor), None)
    s: dict[str, Any] = {"updates": len(rows), "first_update_entropy_below_1e-3": first and first["update"],
                         "final_entropy_mean_last20": float(np.mean([r["entropy"] for r in rows[-20:]])),
                         "final_episode_length_mean20": rows[-1]["episode_length_mean20"]}
    if first:
        i = rows.index(first)
        before, during = rows[:max(0, i - burst)], rows[max(0, i - burst):i + 1]

        def med(rs: list[dict[str, float]], key: str) -> float:
            return float(np.median([r[key] for r in rs])) if rs else float("nan")

        def gap_change(rs: list[dict[str, float]]) -> list[float]:
            return [r["logit_gap_after"] - r["logit_gap_before"] for r in rs]

        step0 = med(before, "weight_step")
        s["before_vs_burst"] = {
            "burst_updates": len(during),
            "logit_gap_change_per_update_median": [float(np.median(gap_change(before))), float(np.median(gap_change(during)))],
            "logit_gap_change_burst_total": float(np.sum(gap_change(during))),
            "weight_step_median": [step0, med(during, "weight_step")],
            "burst_weight_step_over_median_before": [r["weight_step"] / step0 for r in during],
            "burst_logit_gap_after": [r["logit_gap_after"] for r in during],
            "grad_norm_median": [med(before, "grad_norm"), med(during, "grad_norm")],
            "value_loss_median": [med(before, "value_loss"), med(during, "value_loss")],
            "adv_abs_mean_median": [med(before, "adv_abs_mean"), med(during, "adv_abs_mean")]}
        s["around_first_collapse"] = rows[max(0, i - 12):i + 4]
    return s


# ---------------------------------------------------------------- part 3: the trainer, with and without the guard

def sampled_score(run_dir: str, episodes: int = 16) -> float:
    """Mean score of the run's final checkpoint playing with actions drawn from its policy (as in training):
    on the states it visits itself, where a collapse shows (CartPole: ~9 steps, one action always)."""
    from ba3c import checkpoint as ckpt
    from ba3c.evaluation import evaluate_model, model_from_checkpoint

    c = ckpt.load_latest(os.path.join(run_dir, "checkpoints"))
    assert c is not None, f"no checkpoint in {run_dir}"
    model, spec, _ = model_from_checkpoint(c)
    return float(evaluate_model(model, spec, episodes, "sampled", num_envs=8, num_threads=1)["score"]["mean"])


def trainer_run(mode: str, seed: int, work: str) -> dict[str, Any]:
    run_dir = os.path.join(work, f"{mode}-s{seed}")
    cmd = harness.train_command(*GUARD_FLAGS, "--collapse-guard", mode, "--seed", str(seed), "--run-dir", run_dir)
    p = subprocess.run(cmd, cwd=harness.ROOT, env=harness.child_env(), capture_output=True, text=True, timeout=1800)
    rows = harness.progress_rows(run_dir)
    events_path = os.path.join(run_dir, "events.csv")
    events = list(csv.DictReader(open(events_path, newline=""))) if os.path.exists(events_path) else []
    intervals = [r.get("guard") for r in rows]
    score = sampled_score(run_dir)
    return {"mode": mode, "seed": seed, "returncode": p.returncode,
            "collapses_detected": sum(1 for e in events if e["event"] in ("warn", "rollback", "give_up")),
            "rollbacks": sum(1 for e in events if e["event"] == "rollback"),
            "events": [{k: e[k] for k in ("updates", "event", "reason", "snapshot_update", "lr_scale")} for e in events],
            "rows_collapsed_fraction": intervals.count("collapsed") / max(1, len(intervals)),
            "last_row_entropy_mean": float(rows[-1]["entropy_mean"]) if rows else None,
            "last_return_mean20": float(rows[-1]["return_mean20"]) if rows and rows[-1]["return_mean20"] else None,
            "final_checkpoint_sampled_score": score, "ended_collapsed": score < 15}


# ---------------------------------------------------------------- part 4: the collapsed Pong checkpoints

def pong_logits(ckpt_dir: str) -> list[dict[str, Any]]:
    from ba3c import checkpoint as ckpt
    from ba3c.model import build_model
    from ba3c.simulators import make_simulator, resolve_env
    from ba3c.tfquiet import import_tensorflow_quietly

    import_tensorflow_quietly()
    sim = make_simulator(resolve_env("pong"), 16, 16, 1, 108_000)
    rng, frames = np.random.default_rng(0), []
    b = sim.reset(1)
    for t in range(400):  # frames from random play, a few from each stretch of it
        sim.send(rng.integers(0, sim.num_actions, len(b.env_ids)).astype(np.int32))
        b = sim.recv()
        if t % 40 == 0:
            frames.append(b.obs.copy())
    sim.close()
    obs = np.concatenate(frames)
    model = build_model("nature", sim.obs_shape, sim.num_actions, seed=0)
    out = []
    for path in ckpt.list_all(ckpt_dir):
        c = ckpt.read_verified(path)
        ckpt.assign_arrays(model.weights, c.arrays[:len(model.weights)], path)
        logits = np.asarray(model(obs)[0], np.float64)
        top2 = np.sort(logits, axis=1)[:, -2:]
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        out.append({"checkpoint": os.path.basename(path), "updates": c.meta["updates"], "frames_evaluated": len(obs),
                    "logits_mean": logits.mean(0).round(3).tolist(), "gap_mean": float(np.mean(top2[:, 1] - top2[:, 0])),
                    "argmax_counts": np.bincount(logits.argmax(1), minlength=sim.num_actions).tolist(),
                    "entropy_mean": float(np.mean(-(p * np.log(np.maximum(p, 1e-300))).sum(1)))})
    return out


# ---------------------------------------------------------------- part 5: runs made separately

def run_summary(run_dir: str) -> dict[str, Any]:
    with open(os.path.join(run_dir, "config.json")) as fh:
        cfg = json.load(fh)
    rows = harness.progress_rows(run_dir)
    events_path = os.path.join(run_dir, "events.csv")
    events = list(csv.DictReader(open(events_path, newline=""))) if os.path.exists(events_path) else []
    num = lambda v: float(v) if v not in ("", None) else None  # noqa: E731
    return {"run_dir": run_dir, "config": cfg,
            "columns": ["updates", "frames", "entropy_mean", "grad_norm_max", "return_mean20", "guard"],
            "rows": [[int(r["updates"]), int(r["frames"]), num(r["entropy_mean"]), num(r["grad_norm_max"]),
                      num(r["return_mean20"]), r["guard"]] for r in rows],
            "events": events}


def plot_runs(runs: dict[str, dict[str, Any]], out_png: str) -> None:
    """One panel per run: mean entropy per progress row against updates, the guard's events marked."""
    plt = harness.pyplot()
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.6 * len(runs)), squeeze=False)
    for ax, (name, r) in zip(axes[:, 0], runs.items()):
        ax.semilogy([x[0] for x in r["rows"]], [max(x[2], 1e-12) for x in r["rows"]])
        for e in r["events"]:
            ax.axvline(int(e["updates"]), color="tab:red" if e["event"] == "rollback" else "tab:orange",
                       linestyle="--" if e["event"] == "rollback" else ":", alpha=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("entropy (nats)")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("update (red dashed: rollback; orange dotted: collapse reported, warn mode)")
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------- plot and main

def plot(probe_rows: list[dict[str, float]], title: str, out_png: str) -> None:
    plt = harness.pyplot()
    u = [r["update"] for r in probe_rows]
    fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    axes[0].semilogy(u, [max(r["entropy"], 1e-30) for r in probe_rows])
    axes[0].set_ylabel("policy entropy (nats)")
    axes[1].plot(u, [r["logit_gap_after"] for r in probe_rows])
    axes[1].set_ylabel("logit gap (top two)")
    axes[2].semilogy(u, [r["grad_norm"] for r in probe_rows], label="gradient norm before clipping")
    axes[2].semilogy(u, [r["weight_step"] for r in probe_rows], label="weight step ||dθ||")
    axes[2].set_ylabel("norm")
    axes[2].set_xlabel("update")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)
    plt.close(fig)


def learn_overrides(text: str) -> dict[str, Any]:
    """'clip_norm=0.1,lr_adapt=kl' -> typed LearnConfig values; an unknown name or a bad value is an error.
    Values are checked by the trainer's own validation (ba3c.config.validate: choices, ranges)."""
    from ba3c.config import Config, ConfigError, LearnConfig, field_type

    kinds = {f.name: field_type(f) for f in dataclasses.fields(LearnConfig)}
    out: dict[str, Any] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, sep, value = item.partition("=")
        if not sep or name not in kinds:
            raise argparse.ArgumentTypeError(f"{item!r}: give NAME=VALUE with NAME one of {', '.join(sorted(kinds))}")
        try:
            out[name] = kinds[name](value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: {name} takes a {kinds[name].__name__}") from None
    try:
        Config().replace(**out)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(f"--probe-learn: {e}") from None
    return out


def write_rows(rows: list[dict[str, Any]], path: str) -> None:
    """Every update of one probe run (the plotted one), one CSV row each."""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v[0]}:{v[1]:.6g}" if isinstance(v, list) else v) for k, v in r.items()})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe-lrs", default="0.06,0.01", help="learning rates of the synchronous probe")
    ap.add_argument("--probe-seeds", default="0,1")
    ap.add_argument("--probe-updates", type=int, default=600)
    ap.add_argument("--probe-env", default="CartPole-v1",
                    help="game of the synchronous probe: CartPole-v1, or an Atari game (e.g. boxing) with the trainer's "
                         "default model, batch and clipped rewards")
    ap.add_argument("--probe-learn", default="", type=learn_overrides,
                    help="other LearnConfig values for the probe, NAME=VALUE,... (e.g. clip_norm=0.1,lr_adapt=kl)")
    ap.add_argument("--probe-decorrelate", type=int, default=0, metavar="STEPS",
                    help="Atari probe only: before training, environment i plays a random 0..STEPS-1 agent steps into "
                         "a new game (random actions), so that fixed-length games are out of step (Boxing: 1783)")
    ap.add_argument("--name", default="collapse-diagnosis", help="file stem of the JSON and PNG written to --out")
    ap.add_argument("--guard-seeds", default="0,1,2,3", help="seeds of part 3 ('' skips it)")
    ap.add_argument("--pong-checkpoints", default="", help="checkpoint folder of the collapsed gb2048 Pong run (part 4)")
    ap.add_argument("--runs", default="", help="NAME=RUN_DIR,... trainer runs to summarise (part 5)")
    ap.add_argument("--out", default=harness.RESULTS)
    a = ap.parse_args(argv)
    if a.probe_decorrelate < 0:
        ap.error(f"--probe-decorrelate must be >= 0, got {a.probe_decorrelate}")
    if a.probe_decorrelate:
        from ba3c.simulators import resolve_env

        if resolve_env(a.probe_env).kind != "atari":
            ap.error(f"--probe-decorrelate needs an Atari --probe-env (ALE restarts single games), got {a.probe_env}")
    harness.exit_on_sigterm()
    os.makedirs(a.out, exist_ok=True)
    result: dict[str, Any] = {"date": harness.now(), "machine": harness.machine(),
                              "breakout_collapsed_run": breakout_rows(), "committed_runs": committed_collapses(),
                              "probe": [], "guard": [], "pong_gb2048": None}
    runs: list[tuple[float, int, list[dict[str, Any]], bool]] = []
    for lr in (float(x) for x in a.probe_lrs.split(",") if x):
        for seed in (int(x) for x in a.probe_seeds.split(",") if x):
            rows = probe(lr, a.probe_updates, seed, a.probe_env, progress_every=100, learn=a.probe_learn,
                         decorrelate=a.probe_decorrelate)
            s = summarize_probe(rows)
            result["probe"].append({"env": a.probe_env, "lr": lr, "seed": seed, "learn": a.probe_learn,
                                    "decorrelate_steps": a.probe_decorrelate, **s})
            print(f"probe lr {lr:g} seed {seed}: first entropy < 1e-3 at update {s['first_update_entropy_below_1e-3']}, "
                  f"final entropy {s['final_entropy_mean_last20']:.2g}, episodes {s['final_episode_length_mean20']} steps",
                  flush=True)
            runs.append((lr, seed, rows, s["first_update_entropy_below_1e-3"] is not None))
    if runs:  # plotted: the first run that collapsed, else the first run
        lr, seed, rows, _ = next((r for r in runs if r[3]), runs[0])
        extra = "".join(f", {k} {v}" for k, v in a.probe_learn.items())
        extra += f", games decorrelated over {a.probe_decorrelate} steps" if a.probe_decorrelate else ""
        plot(rows, f"{a.probe_env} A2C, Adam lr {lr:g}{extra}, seed {seed}: synchronous probe",
             os.path.join(a.out, f"{a.name}.png"))
        write_rows(rows, os.path.join(a.out, f"{a.name}-probe.csv"))
    if a.guard_seeds:
        with tempfile.TemporaryDirectory(prefix="collapse-") as work:
            for seed in (int(x) for x in a.guard_seeds.split(",")):
                for mode in ("warn", "rollback"):
                    r = trainer_run(mode, seed, work)
                    result["guard"].append(r)
                    print(f"trainer seed {seed} --collapse-guard {mode}: exit {r['returncode']}, collapses "
                          f"{r['collapses_detected']}, rollbacks {r['rollbacks']}, final checkpoint's sampled score "
                          f"{r['final_checkpoint_sampled_score']:.1f}, last mean-20 return {r['last_return_mean20']}",
                          flush=True)
    if a.pong_checkpoints:
        result["pong_gb2048"] = {"checkpoints": a.pong_checkpoints, "by_checkpoint": pong_logits(a.pong_checkpoints)}
    if a.runs:
        result["runs"] = {name: run_summary(d) for name, d in (x.split("=", 1) for x in a.runs.split(","))}
        plot_runs(result["runs"], os.path.join(a.out, "collapse-guard-runs.png"))
    with open(os.path.join(a.out, f"{a.name}.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
