"""Which part of the early updates kills the dense units, and does the global batch matter? (offline)

    python -m benchmarks.unit_death                                   # the committed comparison (~30 min on 2 cores)
    python -m benchmarks.unit_death --arms 2048-sqrt,2048-value-only --samples 100000

Every arm trains a fresh Nature CNN (same seed) with the trainer's own learner (ba3c.learner.Learner,
its loss, clipping, Adam and warm-up) on the same recorded data: uniformly random play in Pong
(--envs emulators, --steps agent steps each, the trainer's preprocessing), each step's target its
discounted Monte Carlo return (clipped rewards, gamma 0.99; the last 200 steps of every emulator
dropped, their returns lacking their future), its advantage that return minus the network's value at
the time of the update. Batches are drawn at random from the recording. This is what the first
updates of a real run see (a policy still near uniform, random play), without the simulators: an
arm at batch B makes --samples / B updates, so every arm sees the same number of samples, and the
feature health (ba3c.model.HealthProbe: units of the 512-unit dense layer above 0 for at least one
of --probe recorded observations, their spread, the logits' and the value's) is measured along the
way. Arms (name: global batch, lr, and what is switched off):

    2048-sqrt         2048, 2.83e-3 (the sqrt rule), warm-up 100 updates, the whole loss
    2048-none         2048, 5e-4 (batch 64's), warm-up 100
    2048-value-only   as 2048-sqrt with the policy-gradient and entropy terms off (advantages 0)
    2048-no-value     as 2048-sqrt with the value term off (--value-coef 0)
    64                64, 5e-4, no warm-up (the default run's settings)

Not a learning run: the data never improve, so after the first few hundred thousand samples an arm
whose policy keeps moving on fixed random-play data drifts off (its logits grow without bound).
Writes benchmarks/results/unit_death.{json,png}.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ba3c.files import write_json
from benchmarks import harness

GAMMA = 0.99
TAIL = 200  # agent steps at the end of each emulator's recording whose returns are left out


@dataclass(frozen=True)
class Arm:
    name: str
    batch: int
    lr: float
    warmup: int = 100
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    policy: bool = True  # False: advantages 0, so the policy-gradient term is 0


ARMS = {a.name: a for a in (
    Arm("2048-sqrt", 2048, 5e-4 * 32 ** 0.5),
    Arm("2048-none", 2048, 5e-4),
    Arm("2048-value-only", 2048, 5e-4 * 32 ** 0.5, policy=False, entropy_coef=0.0),
    Arm("2048-no-value", 2048, 5e-4 * 32 ** 0.5, value_coef=0.0),
    Arm("64", 64, 5e-4, warmup=0),
)}


@dataclass(frozen=True)
class Recording:
    obs: np.ndarray      # (N, 4, 84, 84) uint8
    actions: np.ndarray  # (N,) int32
    returns: np.ndarray  # (N,) float32
    num_actions: int


def record(env: str, envs: int, steps: int, seed: int) -> Recording:
    """Uniformly random play, `steps` (> TAIL) agent steps on each of `envs` emulators, with discounted returns."""
    from ba3c.simulators import make_simulator, resolve_env

    sim = make_simulator(resolve_env(env), envs, envs, min(2, envs), 108_000)
    rng = np.random.default_rng(seed)
    obs, acts, rews, ends = [], [], [], []
    try:
        b = sim.reset(seed)
        for _ in range(steps):
            order = np.argsort(b.env_ids)  # rows by emulator, so that each column is one emulator's history
            a = rng.integers(0, sim.num_actions, envs)
            obs.append(np.array(b.obs)[order])
            acts.append(a)
            sim.send(a[np.asarray(b.env_ids)])  # the action each emulator in this batch plays
            b = sim.recv()
            order = np.argsort(b.env_ids)
            rews.append(np.clip(np.array(b.reward, np.float32)[order], -1, 1))
            ends.append(np.array(b.terminated | b.truncated)[order])
    finally:
        sim.close()
    r, done = np.stack(rews), np.stack(ends)
    g, ret = np.zeros(envs, np.float32), np.zeros_like(r)
    for t in range(steps - 1, -1, -1):
        g = r[t] + GAMMA * g * (1.0 - done[t])
        ret[t] = g
    keep = steps - TAIL
    return Recording(np.stack(obs)[:keep].reshape(-1, *obs[0].shape[1:]), np.stack(acts)[:keep].reshape(-1).astype(np.int32),
                     ret[:keep].reshape(-1), sim.num_actions)


def run_arm(arm: Arm, rec: Recording, samples: int, probe_obs: np.ndarray, points: int, seed: int) -> list[dict[str, Any]]:
    from ba3c.config import LearnConfig
    from ba3c.dist import Dist
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import HealthProbe, build_model

    model = build_model("nature", rec.obs.shape[1:], rec.num_actions, seed=0)
    learner = Learner(model, LearnConfig(train_batch=arm.batch, value_coef=arm.value_coef,
                                         entropy_coef=arm.entropy_coef), Dist(), lr=arm.lr, warmup_updates=arm.warmup)
    probe = HealthProbe(model, probe_obs)
    rng = np.random.default_rng(seed)
    updates = max(1, samples // arm.batch)
    every = max(1, updates // points)
    out, t0 = [], time.perf_counter()
    for u in range(updates + 1):
        if u % every == 0 or u == updates:
            value = float(np.mean(np.asarray(model(probe_obs)[1])))
            out.append({"updates": u, "samples": u * arm.batch, **asdict(probe()), "value_mean": value})
            h = out[-1]
            print(f"unit_death {arm.name}: update {u}/{updates} ({u * arm.batch:,} samples): units active "
                  f"{h['units_active']:.3f}, feature std {h['feature_std']:.4f}, logit std {h['logit_std']:.4f}, "
                  f"value mean {value:.2f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        if u == updates:
            break
        i = rng.integers(0, len(rec.obs), arm.batch)
        obs, returns = rec.obs[i], rec.returns[i]
        adv = returns - np.asarray(model(obs)[1])[:, 0] if arm.policy else np.zeros(arm.batch, np.float32)
        learner.train(TrainBatch(obs, rec.actions[i], returns, adv.astype(np.float32)))
    return out


def plot(result: dict[str, Any], path: str) -> None:
    plt = harness.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    for name, rows in result["arms"].items():
        xs = [r["samples"] / 1e3 for r in rows]
        for ax, key in zip(axes, ("units_active", "feature_std", "value_mean")):
            ax.plot(xs, [r[key] for r in rows], "o-", ms=3, label=name)
    for ax, title in zip(axes, ("dense units ever active", "feature std across observations", "value mean")):
        ax.set(xlabel="samples trained on (thousands)", title=title)
        ax.legend(fontsize=8)
    axes[2].axhline(result["return_mean"], color="grey", ls=":", label="mean return of the recording")
    fig.suptitle("offline: Adam updates on recorded random-play Pong (not a learning run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    p.add_argument("--samples", type=int, default=307_200, help="samples every arm trains on (150 updates at 2048)")
    p.add_argument("--env", default="pong")
    p.add_argument("--envs", type=int, default=32)
    p.add_argument("--steps", type=int, default=700, help="agent steps recorded per emulator")
    p.add_argument("--probe", type=int, default=240, help="recorded observations the feature health is measured on")
    p.add_argument("--points", type=int, default=12, help="measurements per arm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="unit_death")
    p.add_argument("--out", default=harness.RESULTS)
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        p.error(f"--arms: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ARMS)}")
    if min(args.samples, args.envs, args.probe - 1, args.points) < 1:
        p.error("--samples, --envs and --points must be positive and --probe at least 2")
    if args.steps <= TAIL:
        p.error(f"--steps must exceed {TAIL}")
    rec = record(args.env, args.envs, args.steps, args.seed)
    if args.probe > len(rec.obs):
        p.error(f"--probe {args.probe} exceeds the {len(rec.obs)} recorded observations")
    probe_obs = rec.obs[np.random.default_rng(args.seed + 5).choice(len(rec.obs), args.probe, replace=False)]
    print(f"unit_death: {len(rec.obs):,} recorded samples, mean return {rec.returns.mean():.2f}", flush=True)
    result: dict[str, Any] = {
        "what": "offline Adam updates with ba3c's learner on recorded uniformly random play; feature health along "
                "the way (not a learning run)", "env": args.env, "recorded_samples": len(rec.obs),
        "return_mean": float(rec.returns.mean()), "samples_per_arm": args.samples,
        "arm_settings": {a: asdict(ARMS[a]) for a in arms}, "date": dt.date.today().isoformat(),
        "machine": harness.machine(), "arms": {}}
    stem = f"{args.out}/{args.name}"
    for a in arms:
        result["arms"][a] = run_arm(ARMS[a], rec, args.samples, probe_obs, args.points, args.seed + 1)
        write_json(stem + ".json", result)  # after every arm: a stopped comparison keeps what it measured
    plot(result, stem + ".png")
    print(f"wrote {stem}.json, {stem}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
