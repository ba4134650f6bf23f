"""Wiring: simulation thread, learner loop, statistics, signals, logging and checkpoints."""
from __future__ import annotations

import collections
import contextlib
import math
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ba3c import checkpoint as ckpt
from ba3c.config import Config, save_json, scaled_lr
from ba3c.dist import Dist
from ba3c.experience import Episode, Experience, TrainBatch
from ba3c.predictor import sample_actions
from ba3c.signals import EXIT_SIGNALLED, SignalFlag
from ba3c.simulators import EnvSpec, Simulator, make_simulator

# Below this the policy is (nearly) deterministic on the states being played. Breakout once went
# 1.1 -> 1.6e-7 in ~140 updates and its return from 58 to 0, yet the same weights played normally
# after a resume: benchmarks/results/breakout-collapse-diagnosis.json.
COLLAPSED_ENTROPY = 1e-3


def cores_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def configure_tensorflow(cfg: Config) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cfg.run.intra_op_threads or cores_available())
    tf.config.threading.set_inter_op_parallelism_threads(cfg.run.inter_op_threads or 2)


@dataclass
class Timers:
    """Seconds spent per stage, accumulated by the thread that owns each key."""

    seconds: dict[str, float] = field(default_factory=lambda: collections.defaultdict(float))

    def add(self, key: str, t0: float) -> float:
        t1 = time.perf_counter()
        self.seconds[key] += t1 - t0
        return t1


class SimulationThread(threading.Thread):
    """Simulators -> predictor -> experience -> bounded queue of train batches."""

    def __init__(self, sim: Simulator, predictor, experience: Experience, out: "queue.Queue[TrainBatch]",
                 rng: np.random.Generator, env_seed: int) -> None:
        super().__init__(name="SimulationThread", daemon=True)
        self.sim, self.predictor, self.experience, self.out, self.rng = sim, predictor, experience, out, rng
        self.env_seed = env_seed
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.timers = Timers()
        self._episodes: list[Episode] = []
        self._lock = threading.Lock()

    def drain_episodes(self) -> list[Episode]:
        with self._lock:
            eps, self._episodes = self._episodes, []
        return eps

    def run(self) -> None:
        try:
            b = self.sim.reset(self.env_seed)
            while not self.stop.is_set():
                t = time.perf_counter()
                logits, values = self.predictor(b.obs)
                actions = sample_actions(logits, self.rng)
                t = self.timers.add("predict", t)
                self.sim.send(actions)
                batches, episodes = self.experience.add(b.env_ids, b.obs, b.reward, b.terminated, b.truncated,
                                                        values, actions)
                if episodes:
                    with self._lock:
                        self._episodes.extend(episodes)
                t = self.timers.add("experience", t)
                for tb in batches:
                    while not self.stop.is_set():
                        try:
                            self.out.put(tb, timeout=0.2)
                            break
                        except queue.Full:
                            pass
                t = self.timers.add("queue_put_wait", t)
                b = self.sim.recv()
                self.timers.add("env", t)
        except BaseException as e:  # surfaced by the learner loop, which owns the process
            self.error = e


class WatchdogThread(threading.Thread):
    """Ends the process when updates stop: a rank lost mid-allreduce must not hang the job for ever.

    Under mpirun a dead rank already ends the job within seconds; this covers launchers that do not
    notice, and a rank stuck in a collective. Exit status 70; rerun with --resume.
    """

    def __init__(self, timeout_s: float, rank: int) -> None:
        super().__init__(name="WatchdogThread", daemon=True)
        self.timeout_s, self.rank = timeout_s, rank
        self.last_progress = time.monotonic()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(min(10.0, self.timeout_s / 4)):
            idle = time.monotonic() - self.last_progress
            if idle > self.timeout_s:
                print(f"ba3c: rank {self.rank}: no update completed for {idle / 60:.1f} min (another rank lost, or "
                      f"stuck in an allreduce); aborting. Rerun with --resume RUN_DIR.", file=sys.stderr, flush=True)
                os._exit(70)


class EvalThread(threading.Thread):
    """Rank 0's periodic evaluation on a snapshot of the weights, beside training (never blocking it)."""

    def __init__(self, model_kind: str, spec: EnvSpec, cfg: Config, writer, obs_shape, num_actions: int) -> None:
        super().__init__(name="EvalThread", daemon=True)
        from ba3c.model import build_model

        self.model = build_model(model_kind, obs_shape, num_actions, seed=cfg.sim.seed)
        self.spec, self.cfg, self.writer = spec, cfg, writer
        self.jobs: "queue.Queue[tuple[list[np.ndarray], int, int, float] | None]" = queue.Queue(maxsize=1)
        self.error: BaseException | None = None

    def submit(self, weights: list[np.ndarray], frames: int, updates: int, time_s: float) -> bool:
        try:
            self.jobs.put_nowait((weights, frames, updates, time_s))
            return True
        except queue.Full:  # the previous evaluation is still running: skip this one
            return False

    def run(self) -> None:
        from ba3c.evaluate import evaluate_model

        r = self.cfg.run
        while (job := self.jobs.get()) is not None:
            weights, frames, updates, time_s = job
            try:
                self.model.set_weights(weights)
                res = evaluate_model(self.model, self.spec, r.eval_episodes, r.eval_policy,
                                     num_envs=min(r.eval_episodes, 16), max_episode_frames=self.cfg.sim.max_episode_frames,
                                     seed=10_000 + updates, num_threads=1)
                sc = res["score"]
                self.writer.log_eval({"time_s": round(time_s, 2), "frames": frames, "updates": updates,
                                      "policy": r.eval_policy, "episodes": res["episodes"],
                                      "score_mean": sc["mean"], "score_std": sc["std"], "score_median": sc["median"],
                                      "score_min": sc["min"], "score_max": sc["max"],
                                      "length_mean": res["length_steps"]["mean"]}, frames)
                print(f"ba3c: eval at {frames:,} frames: {r.eval_policy} score {sc['mean']:.2f} +- {sc['std']:.2f} "
                      f"over {res['episodes']} episodes", flush=True)
            except BaseException as e:  # reported, never fatal to training
                print(f"ba3c: WARNING: evaluation failed: {e}", file=sys.stderr, flush=True)


def fmt_duration(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def train(cfg: Config, spec: EnvSpec, dist: Dist, run_dir: str, resume: bool, flag: "SignalFlag | None" = None) -> int:
    """Run training to `total_frames`; returns the process exit status."""
    import tensorflow as tf  # noqa: F401  (after configure_tensorflow in the caller)

    from ba3c.learner import Learner
    from ba3c.model import build_model, resolve_model_kind
    from ba3c.predictor import Predictor
    from ba3c.rundir import RunWriter, base_meta, now_iso, plot_curve

    s, l, r = cfg.sim, cfg.learn, cfg.run
    rank, world = dist.rank, dist.size
    batch_size = s.predict_batch if spec.kind == "atari" else s.num_envs
    if flag is None:  # the entry point installs it before the slow start-up; library callers get one here
        flag = SignalFlag()
        flag.install()
    if dist.is_root:
        print(f"ba3c: starting {s.num_envs} {spec.name} simulators per rank", flush=True)
    # ALE builds its emulators in one C++ call under the GIL (minutes for thousands of them)
    with flag.fatal_during_c_call() if spec.kind == "atari" else contextlib.nullcontext():
        sim = make_simulator(spec, s.num_envs, batch_size, s.env_threads or cores_available(), s.max_episode_frames)
    model_kind = resolve_model_kind(l.model, sim.obs_shape)
    model = build_model(model_kind, sim.obs_shape, sim.num_actions, seed=s.seed)  # same init on every rank
    lr = scaled_lr(cfg, world)
    learner = Learner(model, l, dist, lr, l.warmup_updates if lr > l.lr else 0)

    # ---- resume (rank 0 reads, everyone gets the state by broadcast)
    start_updates, start_episodes, start_frames, prior_time, prior_cpu = 0, 0, 0, 0.0, 0.0
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    meta_prev: dict[str, Any] = {}
    cpu_from_start = True  # False once resumed from a checkpoint that did not count CPU seconds from the start
    config_changes: dict[str, list[Any]] = {}
    if resume and dist.is_root:
        c = ckpt.load_latest(ckpt_dir)
        if c is None:
            print(f"ba3c: no valid checkpoint in {ckpt_dir}; starting from scratch", file=sys.stderr)
        else:
            learner.load_state_arrays(c.arrays)
            meta_prev = c.meta
            old_cfg = {k: v for g in c.meta.get("config", {}).values() for k, v in g.items()}
            new_cfg = {k: v for g in cfg.to_dict().values() for k, v in g.items()}
            config_changes = {k: [old_cfg.get(k), v] for k, v in new_cfg.items() if old_cfg.get(k) != v and k != "resume"}
            if config_changes:
                print(f"ba3c: resume changes {', '.join(f'{k}: {a!r} -> {b!r}' for k, (a, b) in config_changes.items())}")
            start_updates, start_episodes = int(c.meta["updates"]), int(c.meta["episodes"])
            start_frames = int(c.meta["frames"])
            prior_time = float(c.meta.get("time_s", 0.0))
            if "cpu_s" not in c.meta:
                print("ba3c: this checkpoint predates CPU accounting; cpu_s counts from this resume", file=sys.stderr)
            prior_cpu = float(c.meta.get("cpu_s", 0.0))
            cpu_from_start = bool(c.meta.get("cpu_s_from_start", False))
            print(f"ba3c: resuming from {c.path} (update {start_updates:,}, "
                  f"{int(c.meta['frames']):,} frames; trained on {c.meta.get('world_size')} ranks, now {world})")
    start_updates, start_episodes, start_frames, prior_time, prior_cpu = dist.broadcast_obj(
        (start_updates, start_episodes, start_frames, prior_time, prior_cpu))
    learner.broadcast_from_root()
    learner.updates = start_updates

    global_batch = l.train_batch * world
    frames_per_update = global_batch * spec.frames_per_step
    # frames so far come from the checkpoint: a resume may change the world size, hence frames per update
    total_updates = start_updates + max(0, math.ceil((r.total_frames - start_frames) / frames_per_update))

    writer = None
    if dist.is_root:
        writer = RunWriter(run_dir, start_updates if resume else None)
        save_json(cfg, os.path.join(run_dir, "config.json"))
        meta = {**base_meta(dist.name, world), "start": now_iso(), "end": None, "model": model_kind,
                "env": {"kind": spec.kind, "name": spec.name}, "global_batch": global_batch, "lr_effective": lr,
                "num_params": int(model.count_params()), "resumed_from_update": start_updates if resume else None,
                "config_changes_on_resume": config_changes}
        writer.write_json("meta.json", meta)
        print(f"ba3c: {spec.kind}:{spec.name} model={model_kind} ({model.count_params():,} params) ranks={world} "
              f"dist={dist.name} global_batch={global_batch} lr={lr:.2e} -> {run_dir}", flush=True)

    rng = np.random.default_rng([s.seed, rank, start_updates])
    # Disjoint seed blocks per rank (seed + rank), shifted on resume so emulators do not replay starts.
    env_seed = (s.seed + rank) * s.num_envs + start_updates * 7919
    q: queue.Queue[TrainBatch] = queue.Queue(maxsize=r.queue_batches)
    exp = Experience(s.num_envs, sim.obs_shape, sim.obs_dtype, l.n_step, l.gamma, l.train_batch,
                     clip_rewards=spec.kind == "atari")
    sim_thread = SimulationThread(sim, Predictor(model, sim.obs_shape, sim.obs_dtype), exp, q, rng, env_seed)

    recent: collections.deque[Episode] = collections.deque(maxlen=100)
    episodes_total = start_episodes
    learn_timers = Timers()
    t_start = time.time()
    cpu_start = time.process_time()  # whole process, every thread (simulators, predictor, learner, eval)
    cpu_total = prior_cpu  # all ranks, as of the last sync point; rank 0 only
    last_log_t, last_log_updates = t_start, start_updates
    last_ckpt_t = t_start
    last_stats = None
    collapse_warned = False
    status = 0
    stopped_early = False
    updates = start_updates

    def frames_at(u: int) -> int:
        return start_frames + (u - start_updates) * frames_per_update

    def save_checkpoint() -> None:
        meta_c = {"updates": updates, "frames": frames_at(updates), "episodes": episodes_total,
                  "time_s": prior_time + time.time() - t_start, "cpu_s": cpu_total, "cpu_s_from_start": cpu_from_start,
                  "world_size": world,
                  "config": cfg.to_dict(), "rng": {"seed": s.seed}, "model": model_kind,
                  "num_actions": sim.num_actions, "obs_shape": list(sim.obs_shape)}
        path = ckpt.save(ckpt_dir, updates, learner.state_arrays(), meta_c, r.keep_checkpoints)
        print(f"ba3c: checkpoint {path}", flush=True)

    evaluator = None
    next_eval = (frames_at(start_updates) // r.eval_every_frames + 1) * r.eval_every_frames if r.eval_every_frames else 0
    if dist.is_root and r.eval_every_frames:
        evaluator = EvalThread(model_kind, spec, cfg, writer, sim.obs_shape, sim.num_actions)
        evaluator.start()
    watchdog = WatchdogThread(r.hang_timeout_min * 60, rank)
    sim_thread.start()
    watchdog.start()
    try:
        while updates < total_updates:
            t = time.perf_counter()
            while True:
                try:
                    batch = q.get(timeout=1.0)
                    break
                except queue.Empty:
                    if sim_thread.error is not None:
                        raise sim_thread.error
            t = learn_timers.add("queue_wait", t)
            last_stats = learner.train(batch)
            learn_timers.seconds["train"] += last_stats.train_s - last_stats.allreduce_s
            learn_timers.seconds["allreduce"] += last_stats.allreduce_s
            updates += 1
            flag.started = True  # from now on a stop request checkpoints first
            watchdog.last_progress = time.monotonic()
            if sim_thread.error is not None:
                raise sim_thread.error
            if updates % r.stats_interval_updates and updates != total_updates:
                continue
            # ---- sync point: every rank takes part, in the same order
            eps = sim_thread.drain_episodes()
            local = ([(e.score, e.length) for e in eps], dict(sim_thread.timers.seconds),
                     dict(learn_timers.seconds), time.process_time() - cpu_start)
            gathered = dist.gather(local)
            timed_out = r.max_minutes > 0 and time.time() - t_start > r.max_minutes * 60
            stop = dist.any_true(flag.received is not None or timed_out)
            if dist.is_root:
                assert gathered is not None and writer is not None
                for g in gathered:
                    for score, length in g[0]:
                        recent.append(Episode(0, score, length, False))
                    episodes_total += len(g[0])
                cpu_total = prior_cpu + sum(g[3] for g in gathered)
                now = time.time()
                if now - last_log_t >= r.log_interval_s or updates == total_updates or stop:
                    du, dt_ = updates - last_log_updates, max(now - last_log_t, 1e-9)
                    fps, ups = frames_at(du) / dt_, du / dt_
                    rets = [e.score for e in recent]
                    mean = float(np.mean(rets)) if rets else float("nan")
                    mean20 = float(np.mean(rets[-20:])) if rets else float("nan")
                    eta = (total_updates - updates) / ups if ups > 0 else float("inf")
                    elapsed = prior_time + now - t_start
                    print(f"[{updates / total_updates:6.1%}] frames {frames_at(updates):,}/{r.total_frames:,} | "
                          f"{fps:,.0f} fps | {ups:.2f} upd/s | return {mean:.2f} (last {len(rets)}; "
                          f"{episodes_total} episodes) | elapsed {fmt_duration(elapsed)} ETA {fmt_duration(eta)}",
                          flush=True)
                    row = {"time_s": round(elapsed, 2), "cpu_s": round(cpu_total, 3), "frames": frames_at(updates), "updates": updates,
                           "episodes": episodes_total, "return_mean": mean if rets else "",
                           "return_mean20": mean20 if rets else "", "return_max": max(rets) if rets else "",
                           "episode_length_mean": float(np.mean([e.length for e in recent])) if rets else "",
                           "frames_per_s": round(fps, 1), "updates_per_s": round(ups, 3),
                           "policy_loss": last_stats.policy_loss, "value_loss": last_stats.value_loss,
                           "entropy": last_stats.entropy, "grad_norm": last_stats.grad_norm,
                           "lr": learner.current_lr()}
                    scalars = {"perf/frames_per_s": fps, "perf/updates_per_s": ups,
                               "losses/policy": last_stats.policy_loss, "losses/value": last_stats.value_loss,
                               "losses/entropy": last_stats.entropy, "losses/grad_norm": last_stats.grad_norm}
                    if rets:
                        scalars["charts/episode_return"] = mean
                    for k, v in {**gathered[0][1], **gathered[0][2]}.items():
                        scalars[f"time/{k}"] = v
                        row[f"t_{k}"] = round(v, 3)
                    writer.log(row, scalars, frames_at(updates))
                    if last_stats.entropy < COLLAPSED_ENTROPY and not collapse_warned:
                        collapse_warned = True
                        print(f"ba3c: warning: policy entropy {max(last_stats.entropy, 0.0):.1e} at update {updates:,}: the "
                              f"policy has collapsed onto one action on the states it now sees. Once (Breakout) "
                              f"this was the simulators, not the network: stop and --resume (fresh simulators); if "
                              f"it recurs, resume from an earlier checkpoint (they rotate: copy one out), perhaps "
                              f"with a lower --lr.", file=sys.stderr, flush=True)
                    last_log_t, last_log_updates = now, updates
                if evaluator is not None and frames_at(updates) >= next_eval:
                    evaluator.submit([np.array(w) for w in model.get_weights()], frames_at(updates), updates,
                                     prior_time + now - t_start)
                    next_eval += r.eval_every_frames
                if now - last_ckpt_t >= r.checkpoint_interval_min * 60 and not stop:
                    save_checkpoint()
                    last_ckpt_t = now
            if stop:
                status = 0 if (timed_out and flag.received is None) else EXIT_SIGNALLED
                stopped_early = True
                break
        learner.flush()  # every rank: an overlapped last update must finish its exchange
    finally:
        # Stopped before the end phase: a long final evaluation must not trip it. A rank that fails
        # from here on exits at once (train.py), which ends the job under mpirun.
        watchdog.stop.set()
        sim_thread.stop.set()
        sim_thread.join(timeout=10)
        sim.close()
        flag.restore()
    if evaluator is not None:  # let a running evaluation finish and be logged
        evaluator.jobs.put(None)
        evaluator.join()
    if dist.is_root:
        assert writer is not None
        save_checkpoint()
        writer.close()
        curve = plot_curve(run_dir)
        meta = {**meta, "end": now_iso(), "final_update": updates, "final_frames": frames_at(updates),
                "exit_status": status, "stage_seconds_rank0": {**sim_thread.timers.seconds, **learn_timers.seconds}}
        writer.write_json("meta.json", meta)
        print_timers(sim_thread.timers.seconds, learn_timers.seconds, time.time() - t_start)
        if stopped_early:
            why = "by signal" if status == EXIT_SIGNALLED else f"after --max-minutes {r.max_minutes}"
            print(f"ba3c: stopped {why} at update {updates:,}; continue with --resume {run_dir}", flush=True)
        else:
            print(f"ba3c: done: {frames_at(updates):,} frames, {updates:,} updates"
                  + (f"; curve {curve}" if curve else ""), flush=True)
    # Nobody leaves before rank 0 has written: mpirun kills the whole job when one rank exits non-zero.
    dist.barrier()
    return status


def print_timers(sim_s: dict[str, float], learn_s: dict[str, float], wall: float) -> None:
    print(f"{'stage (rank 0)':<28}{'seconds':>10}{'% of wall':>11}")
    for thread, d in (("simulation thread", sim_s), ("learner thread", learn_s)):
        for k, v in sorted(d.items(), key=lambda kv: -kv[1]):
            print(f"  {thread + ': ' + k:<26}{v:>10.1f}{100 * v / max(wall, 1e-9):>10.1f}%")
