"""Study: does Gorila's asynchronous parameter server beat the synchronous exchange (issue 43, item 7)?

Gorila (Nair et al. 2015) let each learner push gradients, tagged with the parameter version they were
computed from, to parameter-server shards that apply them at once and drop those too stale; learners pull
fresh parameters as they go. ba3c's Gorila mode is the synchronous form: every rank averages its gradient
with the others' each update, so the slowest rank sets everyone's pace. The asynchronous form can only win
where that wait is large (a slow or loaded rank) and the staleness it adds costs less learning than the
wait costs time.

This study measures both on the same parts (ba3c's replay memory, epsilon-greedy actor, DQN loss and
target network, CartPole) before anything goes into the trainer:
* `sync`: L bundles; each update every bundle's gradient is summed by `MPI_Allreduce` and every bundle
  applies the same Adam step (ba3c's mode, with mpi4py in place of Horovod).
* `async`: rank 0 is the parameter server, ranks 1..L bundles. A bundle sends [version, gradient], posts a
  non-blocking receive for the reply, acts meanwhile, and before its next gradient waits for that reply: the
  parameters (and the target network) after the server applied, or dropped, the gradient. The server
  applies each gradient on arrival unless more than --max-stale updates were applied since its version.
  MPI point-to-point operations only (no socket server).
One bundle can be slowed (--slow-rank, --slow-ms: a sleep after each of its vector steps), the case where
the asynchronous form should win. The run lasts --seconds of wall time; the server (async) or bundle 0
(sync) keeps a snapshot of the weights every --snapshot-s, and after the timed part each snapshot is
played greedily for --eval-episodes CartPole games with fixed seeds: the learning curve against wall time.

`python -m studies.gorila_async` (no --worker) runs the comparison: each setting and seed under mpirun,
alternating the modes, then the table, JSON and plot.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GRAD, REPLY = 1, 2  # MPI tags
THRESHOLD = 195.0  # a CartPole-v1 greedy mean that counts as learned (v0's "solved" score)


@dataclass(frozen=True)
class Settings:
    """The CartPole setting of ba3c's Gorila learning test (tests/unit/test_gorila_train.py), per bundle."""
    num_envs: int = 8
    replay_size: int = 20_000
    learning_starts: int = 1_000
    train_every: int = 4
    target_every: int = 100
    train_batch: int = 64
    lr: float = 1e-3
    gamma: float = 0.99
    eps_decay_steps: int = 10_000
    eps_end: float = 0.05


# ---------------------------------------------------------------- one MPI process

class Bundle:
    """A Gorila bundle's actor, replay shard and gradient computation (no optimizer: who applies is the mode's)."""

    def __init__(self, s: Settings, bundles: int, seed: int, rank_seed: int) -> None:
        import tensorflow as tf

        from ba3c import api
        from ba3c.algos.dqn import DQNLoss, Gorila, GorilaActor, TargetNetwork
        from ba3c.algos.replay import Replay
        from ba3c.config import Config
        from ba3c.simulators import GymSimulator, resolve_env

        self.s, self.tf = s, tf
        self.sim = GymSimulator(resolve_env("CartPole-v1"), s.num_envs)
        q_cfg = Config().replace(algo="gorila", **Gorila.defaults)  # a Q-network: the head is the algorithm's

        def q_network():  # -> keras.Model
            return api.network(q_cfg, self.sim.obs_shape, self.sim.num_actions, kind="mlp", seed=seed)

        self.model = q_network()
        target = TargetNetwork(self.model, q_network(), s.target_every)
        self.target = target
        self.loss = DQNLoss(target, s.gamma, "huber", double=True)
        replay = Replay(s.replay_size, s.num_envs, self.sim.obs_shape, self.sim.obs_dtype, clip_rewards=False)
        # ranks=bundles: each bundle's epsilon follows its own steps as if all played at its pace
        self.actor = GorilaActor(replay, train_batch=s.train_batch, train_every=s.train_every,
                                 learning_starts=s.learning_starts, ahead_steps=0, epsilon=(1.0, s.eps_end,
                                 s.eps_decay_steps), ranks=bundles, steps_before=0, life_loss_terminal=False,
                                 seed=rank_seed)
        self.rng = np.random.default_rng(rank_seed + 1)
        self.batch = self.sim.reset(seed=rank_seed * 1000)
        self.returns: list[float] = []
        variables = self.model.trainable_variables

        @tf.function
        def grads(obs, actions, rewards, next_obs, dones):
            with tf.GradientTape() as tape:
                loss, _ = self.loss(self.model, obs, actions, rewards, next_obs, dones)
            return tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, variables)], 0)

        self._grads = grads
        both = variables + target.model.trainable_variables
        sizes = [int(np.prod(v.shape)) for v in both]

        @tf.function
        def put(x):
            for part, v in zip(tf.split(x, sizes), both):
                v.assign(tf.reshape(part, v.shape))

        self._put = put
        self.size = sum(sizes[:len(variables)])

    def put(self, x: np.ndarray) -> None:
        """Take the network's weights, then the target's, flat (the parameter server's reply)."""
        self._put(x)

    def act(self) -> None:
        """One vector step: epsilon-greedy on the live weights, recorded in the replay."""
        q = self.model(self.batch.obs, training=False)[0].numpy()
        actions = self.actor.choose(q, self.rng)
        _, episodes = self.actor.add(self.batch, q, actions)
        self.returns += [e.score for e in episodes]
        self.sim.send(actions)
        self.batch = self.sim.recv()

    def due(self) -> bool:
        """The next gradient is due (one per --train-every of this bundle's agent steps after the warm-up)."""
        return self.actor.played >= self.actor.due(self.actor.taken + 1)

    def gradient(self) -> np.ndarray:
        self.actor.taken += 1
        b = self.actor.replay.sample(self.s.train_batch, self.actor.rng)
        return self._grads(b.obs, b.actions, b.rewards, b.next_obs, b.dones).numpy()


class Applier:
    """Adam on a model's variables from a flat gradient (Keras's Adam, whose updates ba3c's learner matches),
    compiled, and the network's and target's weights as one flat vector: the same in both modes."""

    def __init__(self, model, target_model, lr: float) -> None:
        import keras
        import tensorflow as tf

        variables = model.trainable_variables
        both = variables + target_model.trainable_variables
        self.opt = keras.optimizers.Adam(learning_rate=lr, epsilon=1e-8)
        self.opt.build(variables)
        sizes = [int(np.prod(v.shape)) for v in variables]

        @tf.function
        def apply(g):
            parts = [tf.reshape(x, v.shape) for x, v in zip(tf.split(g, sizes), variables)]
            self.opt.apply_gradients(zip(parts, variables))

        @tf.function
        def weights():
            return tf.concat([tf.reshape(v, [-1]) for v in both], 0)

        self._apply, self._weights = apply, weights

    def apply(self, g: np.ndarray) -> None:
        self._apply(g)

    def weights(self) -> np.ndarray:
        """The network's weights, then the target network's, flat."""
        return self._weights().numpy()


def worker(a: argparse.Namespace) -> None:
    """One rank of a `sync` or `async` run; rank 0 writes the result JSON to a.out."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    s = Settings()
    if a.mode == "async" and a.async_lr:  # e.g. half: sync takes one Adam step per gradient of every bundle
        s = replace(s, lr=a.async_lr)
    bundles = size if a.mode == "sync" else size - 1
    if bundles < 1:
        raise SystemExit("async needs at least 2 ranks (a server and a bundle)")
    me = rank if a.mode == "sync" else rank - 1  # bundle index; -1: the server
    slow = a.slow_ms / 1000.0 if me == a.slow_rank else 0.0
    bundle = Bundle(s, bundles, a.seed, a.seed * 7919 + max(me, 0) * 104_729)
    snapshots: list[tuple[float, list]] = []
    stats = {"applied": 0, "dropped": 0, "staleness": [], "bundle_steps": [], "bundle_grads": [],
             "bundle_wait_s": [], "train_returns": []}
    comm.Barrier()
    t0 = time.monotonic()
    next_snap = 0.0

    def snap(now: float) -> None:
        nonlocal next_snap
        if now - t0 >= next_snap:
            snapshots.append((now - t0, [w.numpy().copy() for w in bundle.model.weights]))
            next_snap += a.snapshot_s

    def step() -> None:
        """One vector step of the bundle's actor, then the slowed bundle's extra delay."""
        bundle.act()
        if slow:
            time.sleep(slow)

    if a.mode == "sync":
        applier = Applier(bundle.model, bundle.target.model, s.lr)
        updates, waited = 0, 0.0
        while True:
            step()
            stop = False
            while bundle.due():
                up = time.monotonic() - t0 >= a.seconds and updates >= a.min_updates  # `updates`: the same on all
                g = np.append(bundle.gradient(), np.float32(up))
                w0 = time.monotonic()
                comm.Allreduce(MPI.IN_PLACE, g, op=MPI.SUM)
                waited += time.monotonic() - w0
                if g[-1] > 0:  # any rank's time is up: all stop at the same update
                    stop = True
                    break
                applier.apply(g[:-1] / bundles)
                updates += 1
                bundle.target.after_update(updates)
            if rank == 0:
                snap(time.monotonic())
            if stop:
                break
        mine = (bundle.actor.played, bundle.actor.taken - 1, waited, bundle.returns)
        everyone = comm.gather(mine, root=0)
        if rank == 0:
            stats["applied"] = updates
    elif rank == 0:  # the parameter server
        applier = Applier(bundle.model, bundle.target.model, s.lr)
        version, stopped = 0, 0
        buf = np.empty(1 + bundle.size, np.float32)
        while stopped < bundles:
            status = MPI.Status()
            req = comm.Irecv(buf, source=MPI.ANY_SOURCE, tag=GRAD)
            while not req.Test(status):  # polled with sleeps: a blocking receive spins on a core the bundles need
                time.sleep(0.0002)
            stale = version - int(buf[0])
            if stale <= a.max_stale:
                applier.apply(buf[1:])
                version += 1
                bundle.target.after_update(version)
                stats["applied"] += 1
                stats["staleness"].append(stale)
            else:
                stats["dropped"] += 1
            now = time.monotonic()
            snap(now)
            done = now - t0 >= a.seconds and stats["applied"] >= a.min_updates
            stopped += done
            reply = np.concatenate([[np.float32(version), np.float32(done)], applier.weights()]).astype(np.float32)
            comm.Send(reply, dest=status.Get_source(), tag=REPLY)
        everyone = comm.gather(None, root=0)
    else:  # a bundle
        reply = np.empty(2 + 2 * bundle.size, np.float32)
        version, pending, waited = 0, None, 0.0
        while True:
            step()
            stop = False
            while bundle.due():
                if pending is not None:  # the server's answer to the last gradient: fresh parameters
                    w0 = time.monotonic()
                    pending.Wait()
                    waited += time.monotonic() - w0
                    version = int(reply[0])
                    bundle.put(reply[2:])
                    pending = None
                    if reply[1] > 0:
                        stop = True
                        break
                g = np.concatenate([[np.float32(version)], bundle.gradient()]).astype(np.float32)
                # blocks until the server takes it (it always has a receive posted, except while it applies
                # another gradient): a few ms at most; the reply is what the bundle waits for
                comm.Send(g, dest=0, tag=GRAD)
                pending = comm.Irecv(reply, source=0, tag=REPLY)
            if stop:
                break
        everyone = comm.gather((bundle.actor.played, bundle.actor.taken, waited, bundle.returns), root=0)
    if rank != 0:
        return
    elapsed = time.monotonic() - t0
    for x in everyone:
        if x is None:
            continue
        played, grads, waited, returns = x
        stats["bundle_steps"].append(int(played))
        stats["bundle_grads"].append(int(grads))
        stats["bundle_wait_s"].append(round(waited, 2))
        stats["train_returns"].append([round(r, 1) for r in returns[-20:]])
    curve = evaluate(bundle, snapshots, a.eval_episodes, a.seed)
    result = {"mode": a.mode, "seed": a.seed, "bundles": bundles, "slow_rank": a.slow_rank, "slow_ms": a.slow_ms,
              "max_stale": a.max_stale, "seconds": round(elapsed, 1), "settings": asdict(s),
              "staleness_mean": float(np.mean(stats["staleness"])) if stats["staleness"] else 0.0,
              "staleness_max": int(max(stats["staleness"])) if stats["staleness"] else 0,
              **{k: v for k, v in stats.items() if k != "staleness"},
              "curve": curve, "seconds_to_threshold": first_at(curve, THRESHOLD), **levels(curve)}
    with open(a.out, "w") as fh:
        json.dump(result, fh)


def evaluate(bundle: Bundle, snapshots: list, episodes: int, seed: int) -> list[tuple[float, float]]:
    """(seconds, greedy mean return over `episodes` CartPole games with fixed seeds) per snapshot."""
    import gymnasium as gym

    envs = [gym.make("CartPole-v1") for _ in range(episodes)]
    curve = []
    for t, weights in snapshots:
        bundle.model.set_weights(weights)
        obs = np.stack([e.reset(seed=10_000 + seed * 100 + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
        score, alive = np.zeros(episodes), np.ones(episodes, bool)
        while alive.any():
            q = bundle.model(obs, training=False)[0].numpy()
            for i in np.flatnonzero(alive):
                o, r, te, tr, _ = envs[i].step(int(np.argmax(q[i])))
                obs[i], score[i] = o, score[i] + r
                alive[i] = not (te or tr)
        curve.append((round(t, 2), float(score.mean())))
    return curve


def first_at(curve: list, threshold: float) -> float | None:
    return next((t for t, v in curve if v >= threshold), None)


def levels(curve: list) -> dict[str, float]:
    """What a curve says, beyond its lucky peaks (CartPole's greedy return swings from 10 to 500 between
    snapshots of a DQN run): the mean over all snapshots, and over the last third of the run's time."""
    end = max(t for t, _ in curve)
    return {"mean_all": float(np.mean([v for _, v in curve])),
            "mean_last_third": float(np.mean([v for t, v in curve if t >= end * 2 / 3]))}


# ---------------------------------------------------------------- the comparison

def run_one(mode: str, seed: int, slow_ms: float, a: argparse.Namespace, out_dir: str) -> dict:
    sys.path.insert(0, ROOT)
    from measure.harness import child_env

    ranks = a.bundles if mode == "sync" else a.bundles + 1
    out = os.path.join(out_dir, f"run-{mode}-slow{slow_ms:g}-seed{seed}.json")
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", sys.executable, "-m",
           "studies.gorila_async.gorila_async", "--worker", "--mode", mode, "--seed", str(seed), "--seconds",
           str(a.seconds), "--slow-rank", str(a.slow_rank), "--slow-ms", str(slow_ms), "--max-stale",
           str(a.max_stale), "--async-lr", str(a.async_lr), "--snapshot-s", str(a.snapshot_s), "--eval-episodes",
           str(a.eval_episodes), "--out", out]
    env = child_env()
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["OMP_NUM_THREADS"] = "1"
    env["TF_NUM_INTRAOP_THREADS"] = env["TF_NUM_INTEROP_THREADS"] = "1"
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=a.seconds * 6 + 300)
    if p.returncode != 0:
        raise SystemExit(f"{mode} seed {seed} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    with open(out) as fh:
        r = json.load(fh)
    os.remove(out)
    return r


def compare(a: argparse.Namespace) -> int:
    sys.path.insert(0, ROOT)
    from measure.harness import machine

    os.makedirs(a.out_dir, exist_ok=True)
    runs: list[dict] = []
    modes = ["sync", "async"]
    for i, seed in enumerate(range(a.first_seed, a.first_seed + a.seeds)):
        for slow_ms in [float(x) for x in a.slow_ms_list.split(",")]:
            for mode in (modes if i % 2 == 0 else modes[::-1]):  # alternate the order: the load drifts
                r = run_one(mode, seed, slow_ms, a, a.out_dir)
                runs.append(r)
                print(f"{mode:5s} slow {slow_ms:4g} ms seed {seed}: {r['applied']:,} updates applied "
                      f"({r['dropped']} dropped, staleness mean {r['staleness_mean']:.2f}), bundle steps "
                      f"{r['bundle_steps']}, greedy return: mean {r['mean_all']:.0f}, last third "
                      f"{r['mean_last_third']:.0f}", flush=True)
    path = os.path.join(a.out_dir, f"{a.tag}.json")
    with open(path, "w") as fh:
        command = " ".join(["python -m studies.gorila_async", *sys.argv[1:]])
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "command": command, "machine": machine(), "runs": runs},
                  fh)
    summary(runs)
    plot(runs, os.path.join(a.out_dir, f"{a.tag}.png"))
    print(f"wrote {path}")
    return 0


def summary(runs: list[dict]) -> None:
    """Per setting and mode: medians over the seeds, and async's ratio to sync per seed."""
    print(f"\n{'slow ms':>7} {'mode':>5} {'runs':>4} {'mean, last third':>16} {'mean, all':>9} "
          f"{'updates':>8} {'dropped':>7} {'stale':>5} {'bundle steps':>14}")
    for slow_ms, mode in sorted({(r["slow_ms"], r["mode"]) for r in runs}):
        rs = [r for r in runs if r["slow_ms"] == slow_ms and r["mode"] == mode]
        def med(k: str, rs: list[dict] = rs) -> float:
            return float(np.median([r[k] for r in rs]))

        steps = np.median([r["bundle_steps"] for r in rs], axis=0).astype(int).tolist()
        print(f"{slow_ms:7g} {mode:>5} {len(rs):4d} {med('mean_last_third'):16.0f} {med('mean_all'):9.0f} "
              f"{med('applied'):8,.0f} {med('dropped'):7.0f} {med('staleness_mean'):5.2f} {str(steps):>14}")


def plot(runs: list[dict], path: str) -> None:
    sys.path.insert(0, ROOT)
    from measure.harness import pyplot

    plt = pyplot()
    slows = sorted({r["slow_ms"] for r in runs})
    fig, axes = plt.subplots(1, len(slows), figsize=(6 * len(slows), 4), squeeze=False)
    for ax, slow_ms in zip(axes[0], slows):
        for r in runs:
            if r["slow_ms"] != slow_ms:
                continue
            t, v = zip(*r["curve"])
            ax.plot(t, v, color="C0" if r["mode"] == "sync" else "C1", alpha=0.7,
                    label=r["mode"] if r["seed"] == min(x["seed"] for x in runs) else None)
        ax.axhline(THRESHOLD, color="grey", lw=0.8, ls=":")
        title = f"bundle {runs[0]['slow_rank']} slowed by {slow_ms:g} ms per step" if slow_ms else "no slow bundle"
        ax.set(title=title, xlabel="wall seconds", ylabel="greedy return (10 games)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Gorila's asynchronous parameter server against the synchronous "
                                            "exchange, CartPole, wall time to a greedy return.")
    p.add_argument("--worker", action="store_true", help="run one MPI rank (used under mpirun)")
    p.add_argument("--mode", choices=("sync", "async"), default="sync", help="worker: the exchange")
    p.add_argument("--seed", type=int, default=0, help="worker: the run's seed")
    p.add_argument("--out", default="", help="worker: where rank 0 writes its result")
    p.add_argument("--seconds", type=float, default=90.0, help="wall time of each run's training")
    p.add_argument("--min-updates", type=int, default=0,
                   help="worker: go on past --seconds until this many updates were applied (smoke tests)")
    p.add_argument("--slow-rank", type=int, default=1, help="the bundle slowed (0-based)")
    p.add_argument("--slow-ms", type=float, default=0.0, help="worker: its sleep after each vector step")
    p.add_argument("--slow-ms-list", default="0,15", help="the slow bundle's sleeps compared, comma-separated")
    p.add_argument("--async-lr", type=float, default=0.0, help="async: the server's lr (0: the same as sync's)")
    p.add_argument("--max-stale", type=int, default=4, help="async: drop a gradient more updates old than this")
    p.add_argument("--snapshot-s", type=float, default=3.0, help="seconds between weight snapshots")
    p.add_argument("--eval-episodes", type=int, default=10, help="greedy games per snapshot")
    p.add_argument("--bundles", type=int, default=2, help="actor/learner bundles")
    p.add_argument("--seeds", type=int, default=3, help="seeds per setting")
    p.add_argument("--first-seed", type=int, default=1, help="the first seed")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"), help="where the JSON and plot go")
    p.add_argument("--tag", default="gorila_async", help="file name of the JSON and plot")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.worker:
        worker(a)
        return 0
    return compare(a)


if __name__ == "__main__":
    sys.exit(main())
