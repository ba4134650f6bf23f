"""Feature health of saved networks: do the units the policy and value heads read still respond to the game?

    python -m benchmarks.feature_health runs/batch_scaling/gb256-sqrt runs/batch_scaling/gb2048-kl
    python -m benchmarks.feature_health runs/pong-.../checkpoints/ckpt-0000012345.npz --obs 480

For every checkpoint of each run directory (rotated and kept ones, oldest first) or each named .npz, and
for the untrained network the first one was built from: the fraction of the heads' input units (the
Nature CNN's 512 dense ReLU units) above 0 for at least one observation, their spread across observations,
and the spread of the policy logits and the value (ba3c.model.HealthProbe, which the trainer also logs in
progress.csv). The observations are the same for every network: --obs of them from uniformly random play
in the first checkpoint's game, through the trainer's own preprocessing, every 10th step of
--envs emulators (seeded). A network near 0 on all of these plays one policy everywhere: in this
project's batch-2048 Pong runs most units had died and the policy had gone back to uniform (README).
Writes benchmarks/results/feature_health[-NAME].{json,png}.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from dataclasses import asdict
from typing import Any

import numpy as np

from ba3c.files import write_json
from benchmarks import harness

STRIDE = 10  # keep every 10th step: consecutive frames of one emulator are nearly the same observation


def checkpoint_paths(path: str) -> list[str]:
    """A run directory (or its checkpoints/) -> all its checkpoints, oldest first; an .npz -> itself."""
    from ba3c import checkpoint as ckpt

    if path.endswith(".npz") and os.path.isfile(path):
        return [path]
    sub = os.path.join(path, "checkpoints")
    found = ckpt.list_all(sub if os.path.isdir(sub) else path)
    if not found:
        raise SystemExit(f"feature_health: no checkpoint in '{path}' (a run directory, its checkpoints/, or an .npz)")
    return found


def probe_observations(spec, n: int, envs: int, seed: int) -> np.ndarray:
    """n observations of uniformly random play, every STRIDE-th step of `envs` emulators."""
    from ba3c.simulators import make_simulator

    sim = make_simulator(spec, envs, envs, min(2, envs), 108_000)
    try:
        rng = np.random.default_rng(seed)
        sim.reset(seed)
        kept: list[np.ndarray] = []
        step = 0
        while sum(len(k) for k in kept) < n:
            sim.send(rng.integers(0, sim.num_actions, envs))
            batch = sim.recv()
            step += 1
            if step % STRIDE == 0:
                kept.append(np.array(batch.obs))
        return np.concatenate(kept)[:n]
    finally:
        sim.close()


def measure(paths: list[str], n_obs: int, envs: int, seed: int) -> dict[str, Any]:
    from ba3c import checkpoint as ckpt
    from ba3c.evaluation import checkpoint_config, model_from_checkpoint
    from ba3c.model import HealthProbe, build_model

    first = ckpt.read_verified(paths[0])
    spec, cfg = checkpoint_config(first)
    obs = probe_observations(spec, n_obs, envs, seed)
    meta = first.meta
    init = build_model(meta["model"], tuple(meta["obs_shape"]), int(meta["num_actions"]), seed=cfg.sim.seed)
    rows = [{"network": "untrained (the first checkpoint's model and seed)", "updates": 0, "frames": 0,
             **asdict(HealthProbe(init, obs)())}]
    for path in paths:
        c = ckpt.read_verified(path)
        model, other, _ = model_from_checkpoint(c)
        if other != spec:
            raise SystemExit(f"feature_health: {path} plays {other.name}, the first checkpoint {spec.name}: "
                             f"measure one game at a time")
        h = HealthProbe(model, obs)()
        rows.append({"network": os.path.relpath(path, harness.ROOT), "updates": int(c.meta.get("updates", 0)),
                     "frames": int(c.meta.get("frames", 0)), **asdict(h)})
        print(f"{rows[-1]['network']}: units active {h.units_active:.3f}, feature std {h.feature_std:.4g}, "
              f"logit std {h.logit_std:.4g}, value std {h.value_std:.4g}", flush=True)
    return {"what": "feature health (ba3c.model.HealthProbe) of each network on the same observations",
            "observations": f"{len(obs)} from uniformly random play in {spec.kind}:{spec.name} (seed {seed}, "
                            f"{envs} emulators, every {STRIDE}th step)",
            "date": dt.date.today().isoformat(), "machine": harness.machine(), "networks": rows}


def plot(result: dict[str, Any], path: str) -> None:
    plt = harness.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in result["networks"][1:]:
        by_run.setdefault(os.path.dirname(os.path.dirname(r["network"])) or r["network"], []).append(r)
    init = result["networks"][0]
    for ax, key, label in ((axes[0], "units_active", "heads' input units ever active"),
                           (axes[1], "logit_std", "policy logits' std across observations")):
        for run, rs in by_run.items():
            ax.plot([r["updates"] for r in rs], [r[key] for r in rs], "o-", label=run)
        ax.axhline(init[key], color="grey", ls=":", label="untrained network")
        ax.set(xlabel="updates", ylabel=label, title=label)
        ax.legend(fontsize=7)
    axes[1].set_yscale("log")
    fig.suptitle(result["observations"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="run directories, their checkpoints/ directories, or checkpoint .npz files")
    p.add_argument("--obs", type=int, default=240, help="observations every network is probed on")
    p.add_argument("--envs", type=int, default=8, help="emulators the observations come from")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="", help="results file suffix: feature_health-NAME.{json,png}")
    p.add_argument("--out", default=harness.RESULTS)
    args = p.parse_args(argv)
    if args.obs < 2 or args.envs < 1:
        p.error("--obs must be at least 2 and --envs at least 1")
    for path in args.paths:
        if not os.path.exists(path):
            p.error(f"no such run directory or checkpoint: '{path}'")
    paths = [c for path in args.paths for c in checkpoint_paths(path)]
    result = measure(paths, args.obs, args.envs, args.seed)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "feature_health" + (f"-{args.name}" if args.name else ""))
    write_json(stem + ".json", result)
    plot(result, stem + ".png")
    print(f"wrote {stem}.json, {stem}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
