"""Rank 0's reporting: at each sync point the progress line, a progress.csv row, TensorBoard scalars
and the collapse guard's events (a line, events.csv); around them the run's first and last words (config.json,
meta.json, the start line, the stage-time table, how the run ended), checkpoints written and periodic evaluation
results.

No collectives here: the runner hands over what its sync point gathered.
"""
from __future__ import annotations

import collections
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from ba3c import checkpoint as ckpt
from ba3c.config import Config, save_json
from ba3c.evaluation import protocol_line
from ba3c.files import EXIT_NO_SPACE, NoSpaceError, fmt_bytes, free_bytes
from ba3c.guard import COLLAPSED, EXIT_COLLAPSED, HEALTHY, SUSPECT, IntervalStats, Plan
from ba3c.learner import StepStats, noise_scale
from ba3c.model import FeatureHealth
from ba3c.rundir import EVAL_PROTOCOL_FILE, RunWriter, now_iso, plot_curve
from ba3c.signals import EXIT_SIGNALLED
from ba3c.state import RunState

_SEVERITY = {HEALTHY: 0, SUSPECT: 1, COLLAPSED: 2}
# The loss's statistics (StepStats.terms) are progress.csv columns by their names; TensorBoard tags losses/<name>,
# BA3C's under their older tags
TERM_TAGS = {"policy_loss": "losses/policy", "value_loss": "losses/value", "entropy": "losses/entropy",
             "epsilon": "charts/epsilon"}
# StepStats field = progress.csv column -> TensorBoard tag
LOSSES = (("grad_norm", "losses/grad_norm"), ("policy_lag", "perf/policy_lag"))


def _cut_kept(lr_scale: float) -> str:
    return "" if lr_scale == 1.0 else f" (the collapse guard's cut x{lr_scale:g} kept)"


def fmt_duration(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def no_space_dir(run_dir: str) -> str:
    return f"{fmt_bytes(free_bytes(run_dir))} free in {run_dir}"


def timer_table(sim_s: dict[str, float], learn_s: dict[str, float], wall: float) -> list[str]:
    """The stage-time table's lines: each thread's stages by time spent, the name column as wide as the longest."""
    rows = [(f"{thread}: {k}", v) for thread, d in (("simulation thread", sim_s), ("learner thread", learn_s))
            for k, v in sorted(d.items(), key=lambda kv: -kv[1])]
    width = max([len("stage (rank 0)") - 2] + [len(name) for name, _ in rows]) + 2
    lines = [f"{'stage (rank 0)':<{width + 2}}{'seconds':>10}{'% of wall':>11}"]
    lines += [f"  {name:<{width}}{v:>10.1f}{100 * v / max(wall, 1e-9):>10.1f}%" for name, v in rows]
    return lines


def print_timers(sim_s: dict[str, float], learn_s: dict[str, float], wall: float) -> None:
    print("\n".join(timer_table(sim_s, learn_s, wall)))


def frames_done(frames: int, total: int) -> str:
    """The progress line's start: the percent and the frames, of one count."""
    return f"[{min(1.0, frames / total):6.1%}] frames {frames:,}/{total:,}"


def waiting_line(total: int, state: RunState, played: int, steps: int, warmup_steps: int, now: float) -> str:
    """The progress line before the first update: the frames played so far and, in a warm-up (a replay memory
    filling), its steps. `played`: frames of all ranks in this process (rank 0's times the ranks: they play in
    step); `steps`: rank 0's agent steps; `warmup_steps`: each rank's before training."""
    frames, elapsed = state.frames + played, max(now - state.t_start, 1e-9)
    if warmup_steps:
        rate = steps / elapsed
        eta = (warmup_steps - steps) / rate if rate > 0 else float("inf")
        what = (f"warm-up {min(steps, warmup_steps):,}/{warmup_steps:,} agent steps per rank | "
                f"{played / elapsed:,.0f} fps | warm-up ends in {fmt_duration(max(0.0, eta))}")
    else:
        what = "waiting for the first train batch"
    return f"{frames_done(frames, total)} | {what} | elapsed {fmt_duration(state.elapsed(now))}"


def noise_columns(noise: list[StepStats]) -> tuple[dict[str, Any], dict[str, float]]:
    """--noise-scale-every's measurements since the last row, pooled before dividing (one measurement's |G|^2 is
    noisy and can be negative): progress.csv columns and TensorBoard scalars."""
    mean = {k: float(np.mean([getattr(n, k) for n in noise]))
            for k in ("grad_sq_small", "grad_sq_big", "pg_sq_small", "pg_sq_big")}
    b_small, b_big = noise[-1].b_small, noise[-1].b_big
    g2, trace, b_simple = noise_scale(mean["grad_sq_small"], mean["grad_sq_big"], b_small, b_big)
    pg2, pg_trace, pg_simple = noise_scale(mean["pg_sq_small"], mean["pg_sq_big"], b_small, b_big)
    row = dict(noise_scale=b_simple, noise_scale_policy=pg_simple, **mean, noise_b_small=b_small, noise_b_big=b_big,
               noise_n=len(noise))
    scalars = {"noise/b_simple": b_simple, "noise/grad_sq_true": g2, "noise/trace_sigma": trace,
               "noise/b_simple_policy": pg_simple, "noise/policy_grad_sq_true": pg2,
               "noise/policy_trace_sigma": pg_trace}
    return row, scalars


class Reporter:
    """Everything rank 0 says and writes about a run, through one `RunWriter`."""

    def __init__(self, run_dir: str, cfg: Config, meta: dict[str, Any], state: RunState, resumed: bool,
                 value_bound: float | None = None, columns: Sequence[str] = ()) -> None:
        """`value_bound`: the most a state can be worth (`Algorithm.value_bound`); a Q-value past it is
        reported (None: not watched). `columns`: the algorithm's statistics, progress.csv columns."""
        self.run_dir, self.run_cfg = run_dir, cfg.run
        self.value_bound = value_bound
        self._q_peak: float | None = None  # the largest |Q| of the updates since the last row (Gorila)
        self._q_warned = 0.0  # the largest |Q| a warning has named
        self.writer = RunWriter(run_dir, state.updates if resumed else None, columns)
        save_json(cfg, os.path.join(run_dir, "config.json"))
        self.meta = meta
        self.writer.write_json("meta.json", meta)
        self.recent: collections.deque[tuple[float, int]] = collections.deque(maxlen=100)  # (score, length)
        self._last_t: float | None = None  # None: before the first sync point
        self._wait_t: float | None = None  # the last line before the first update (`waiting`)
        self._last_updates, self._last_frames = state.updates, state.frames
        self._entropies: list[float] = []  # per sync interval since the last row
        self._grad_max = 0.0
        self._worst = HEALTHY
        self._noise: list[StepStats] = []  # --noise-scale-every's measurements since the last row
        env = f"{meta['env']['kind']}:{meta['env']['name']}"
        print(f"ba3c: {env} model={meta['model']} ({meta['num_params']:,} params) "
              f"ranks={meta['ranks']} dist={meta['dist_backend']} global_batch={meta['global_batch']} "
              f"lr={meta['lr_effective']:.2e}{_cut_kept(meta.get('lr_scale', 1.0))} -> {run_dir}", flush=True)

    def waiting(self, state: RunState, played: int, steps: int, warmup_steps: int, now: float) -> None:
        """Before the first update: `waiting_line` once per --log-interval-s."""
        if self._wait_t is None:
            self._wait_t = now
        if now - self._wait_t >= self.run_cfg.log_interval_s:
            print(waiting_line(self.run_cfg.total_frames, state, played, steps, warmup_steps, now), flush=True)
            self._wait_t = now

    def add_update(self, stats: StepStats) -> None:
        """Each update's statistics that the next row pools: the gradient noise where this update measured it
        (--noise-scale-every) and the largest |Q| (the last update's alone would miss a rare diverging state)."""
        if stats.b_big:
            self._noise.append(stats)
        q = stats.terms.get("q_abs_max")
        if q is not None:
            q = math.inf if math.isnan(q) else q  # a network that gives nan is as diverged as it gets
            self._q_peak = q if self._q_peak is None else max(self._q_peak, q)

    def sync(self, state: RunState, episodes: list[tuple[float, int]], stage_s: dict[str, float], stats: StepStats,
             interval: IntervalStats, verdict: str, lr: float, now: float, *, force: bool,
             health: Callable[[], FeatureHealth] | None = None) -> None:
        """One sync point: remember the episodes and the interval's statistics; once per --log-interval-s (and
        whenever `force`) the progress line, a CSV row and TensorBoard scalars."""
        self.recent.extend(episodes)
        self._entropies.append(interval.entropy)
        self._grad_max = max(self._grad_max, interval.grad_norm_max)
        self._worst = max(self._worst, verdict, key=_SEVERITY.__getitem__)
        if self._last_t is None and not force:
            # The first sync point starts the rates: before it came start-up (the model, the first batches,
            # --decorrelate-steps' random play, counted as frames but not updates), which made the first
            # line's fps and ETA wrong by far (34 hours for a 2-hour run).
            self._last_t, self._last_updates, self._last_frames = now, state.updates, state.frames
            return
        last_t = state.t_start if self._last_t is None else self._last_t
        if now - last_t < self.run_cfg.log_interval_s and not force:
            return
        du, dt = state.updates - self._last_updates, max(now - last_t, 1e-9)
        fps, ups = (state.frames - self._last_frames) / dt, du / dt  # frames: with any FIRE steps after lost lives
        rets = [score for score, _ in self.recent]
        mean = float(np.mean(rets)) if rets else None
        # no episode ended yet in this process (a start, or a resume: the games start again)
        ret = f"{mean:.2f} (last {len(rets)}" if mean is not None else "- (none ended yet"
        # one count behind the percent, the frames and the ETA: the frames played (a replay's warm-up included)
        eta = max(0, self.run_cfg.total_frames - state.frames) / fps if fps > 0 else float("inf")
        print(f"{frames_done(state.frames, self.run_cfg.total_frames)} | {fps:,.0f} fps | {ups:.2f} upd/s | return "
              f"{ret}; {state.episodes} episodes) | elapsed {fmt_duration(state.elapsed(now))} ETA {fmt_duration(eta)}",
              flush=True)
        row = {"time_s": round(state.elapsed(now), 2), "cpu_s": round(state.cpu_s, 3), "frames": state.frames,
               "updates": state.updates, "episodes": state.episodes, "frames_per_s": round(fps, 1),
               "updates_per_s": round(ups, 3), **self._returns_columns(), "lr": lr,
               **{f"t_{k}": round(v, 3) for k, v in stage_s.items()}}
        scalars = {"perf/frames_per_s": fps, "perf/updates_per_s": ups, **{f"time/{k}": v for k, v in stage_s.items()}}
        if mean is not None:
            scalars["charts/episode_return"] = mean
        for name, value in stats.terms.items():
            row[name] = scalars[TERM_TAGS.get(name, f"losses/{name}")] = value
        for column, tag in LOSSES:
            row[column] = scalars[tag] = getattr(stats, column)
        if self._q_peak is not None:  # since the previous row, as grad_norm_max
            row["q_abs_max"] = scalars["losses/q_abs_max"] = self._q_peak
            self._warn_values(self._q_peak, state.updates)
        # since the previous row (the columns above are the last update's): what the collapse guard judged
        row["entropy_mean"] = scalars["losses/entropy_mean"] = float(np.mean(self._entropies))
        row["grad_norm_max"] = scalars["losses/grad_norm_max"] = self._grad_max
        row["guard"], row["rollbacks"] = self._worst, state.rollbacks
        if self._noise:
            noise_row, noise_scalars = noise_columns(self._noise)
            row.update(noise_row)
            scalars.update(noise_scalars)
        if health is not None:  # measured only for a row: a forward pass of the probe
            h = asdict(health())
            row.update(h)
            scalars.update({f"health/{k}": v for k, v in h.items()})
        scalars["guard/rollbacks"] = state.rollbacks
        self.writer.log(row, scalars, state.frames)
        self._last_t, self._last_updates, self._last_frames = now, state.updates, state.frames
        self._entropies, self._grad_max, self._worst, self._noise = [], 0.0, HEALTHY, []
        self._q_peak = None

    def _warn_values(self, q: float, updates: int) -> None:
        """One line when the Q-network first values a state past what any state can be worth, and again only
        when it goes 10 times past the last value named (a diverging network climbs for hours)."""
        bound = self.value_bound
        if bound is None or q <= bound or q <= 10 * self._q_warned:
            return
        self._q_warned = q
        print(f"ba3c: warning: at update {updates:,} the Q-network values a state at {q:,.1f} (column q_abs_max); "
              f"with rewards clipped to [-1, 1] and this gamma no state is worth more than {bound:,.0f}: the "
              f"Q-values are diverging (lower --lr, or --dqn-loss mse if it is huber; docs/gorila.md)",
              file=sys.stderr, flush=True)

    def _returns_columns(self) -> dict[str, Any]:
        """progress.csv's return columns over the last 100 episodes of this process (empty before its first), and
        the mean of its last 20 only once 20 have ended: a resume starts counting again, and a score criterion on
        that column (benchmarks/time_to_score.py) must never judge fewer games."""
        if not self.recent:
            return {"return_mean": "", "return_mean20": "", "return_max": "", "episode_length_mean": ""}
        rets = [score for score, _ in self.recent]
        mean20 = float(np.mean(rets[-20:])) if len(rets) >= 20 else ""
        return {"return_mean": float(np.mean(rets)), "return_mean20": mean20,
                "return_max": max(rets), "episode_length_mean": float(np.mean([n for _, n in self.recent]))}

    def guard(self, plan: Plan, state: RunState, elapsed_s: float) -> None:
        """The collapse guard's plan at a sync point: a line and an events.csv row when it acted."""
        if plan.action in ("none", "snapshot"):
            return
        s, v, u = plan.stats, plan.verdict, state.updates
        ref = f"; largest gradient norm {s.grad_norm_max:.3g}"
        if v.grad_ref:
            ref += f" (recent median {v.grad_ref:.3g})"
        if s.episode_length is not None:
            ref += f"; episodes {s.episode_length:.0f} steps" + (
                f" (recent {v.episode_length_ref:.0f})" if v.episode_length_ref else "")
        if plan.action == "rollback":
            print(f"ba3c: collapse guard: at update {u:,} {v.reason}{ref}; rolled back to the snapshot of update "
                  f"{plan.target:,} (weights and Adam state), lr x{plan.lr_scale:g} from now on (rollback "
                  f"{plan.attempt} of at most {self.run_cfg.guard_max_rollbacks} to that snapshot)",
                  file=sys.stderr, flush=True)
        elif plan.action == "give_up":
            print(f"ba3c: error: collapse guard: at update {u:,} {v.reason}{ref}, after {plan.attempt} rollbacks to "
                  f"the snapshot of update {plan.target:,}; stopping with that snapshot as the final checkpoint. "
                  f"Lower --lr (x{plan.lr_scale:g} was not enough) or raise --warmup-updates, then --resume "
                  f"{self.run_dir}", file=sys.stderr, flush=True)
        else:  # warn
            print(f"ba3c: warning: at update {u:,} {v.reason}{ref}: the policy has collapsed onto one action on the "
                  f"states it now sees (a saturated softmax leaves the entropy bonus no gradient to undo it). "
                  f"--collapse-guard rollback restores a healthy snapshot by itself; otherwise stop and --resume "
                  f"from an earlier checkpoint (keep-*.npz from --keep-every-frames survive rotation), perhaps "
                  f"with a lower --lr.", file=sys.stderr, flush=True)
        self.writer.log_event({"time_s": round(elapsed_s, 2), "frames": state.frames, "updates": u,
                               "event": plan.action, "reason": v.reason, "entropy": s.entropy,
                               "entropy_ref": v.entropy_ref, "grad_norm_max": s.grad_norm_max, "grad_ref": v.grad_ref,
                               "episode_length": s.episode_length, "episode_length_ref": v.episode_length_ref,
                               "snapshot_update": plan.target, "lr_scale": plan.lr_scale,
                               "rollbacks": state.rollbacks})

    def checkpoint_written(self, path: str) -> None:
        print(f"ba3c: checkpoint {path}", flush=True)

    def checkpoint_failed(self, e: NoSpaceError, updates: int, failures: int) -> None:
        """A checkpoint the disk had no room for (nothing of it is left; the older ones are intact): one line."""
        limit = self.run_cfg.checkpoint_max_failures
        then = (f"the run stops at the next sync point ({failures} of {limit} failures in a row)" if failures >= limit
                else f"tried again at the next checkpoint interval ({failures} of {limit} failures in a row before "
                     f"the run stops)")
        print(f"ba3c: warning: checkpoint at update {updates:,}, {e.describe()}; the older checkpoints are kept; "
              f"{then}", file=sys.stderr, flush=True)

    def evaluation(self, result: dict[str, Any], frames: int, updates: int, time_s: float) -> None:
        """A periodic evaluation's result (called from the evaluation thread): a row of eval.csv (its protocol's
        name, cap and truncated episodes), eval/* scalars, the protocol's full record in eval-protocol.json, a line."""
        sc, proto = result["score"], result["protocol"]
        self.writer.log_eval({"time_s": round(time_s, 2), "frames": frames, "updates": updates, "policy": proto["name"],
                              "episodes": result["episodes"], "score_mean": sc["mean"], "score_std": sc["std"],
                              "score_median": sc["median"], "score_min": sc["min"], "score_max": sc["max"],
                              "length_mean": result["length_steps"]["mean"],
                              "max_episode_steps": proto["max_episode_steps"] or "",
                              "truncated_episodes": result["truncated_episodes"],
                              "anti_stuck_replaced": "" if result["anti_stuck_replaced"] is None
                              else sum(result["anti_stuck_replaced"]),
                              "sticky_actions": "" if proto.get("sticky_actions") is None else proto["sticky_actions"]},
                             frames)
        try:
            self.writer.write_json(EVAL_PROTOCOL_FILE, proto)
        except NoSpaceError as e:
            self.writer.warn(EVAL_PROTOCOL_FILE, e,
                             "it keeps the record of an earlier evaluation (eval.csv has this one)")
        print(f"ba3c: eval at {frames:,} frames: score {sc['mean']:.2f} +- {sc['std']:.2f} over {result['episodes']} "
              f"episodes ({result['truncated_episodes']} cut at the cap); {protocol_line(proto)}", flush=True)

    def finish(self, state: RunState, status: int, stopped_early: bool, sim_s: dict[str, float],
               learn_s: dict[str, float], no_space: NoSpaceError | None = None, final_written: bool = True) -> None:
        """After the final checkpoint: close the logs, draw the curve, complete meta.json, say how it ended.
        no_space: with status EXIT_NO_SPACE, the last checkpoint that found no room; final_written: whether the final
        checkpoint was written all the same (room was freed meanwhile)."""
        missing = self.writer.close()  # on a full disk these fail too: named in the last line, not one line each
        curve = None
        try:
            curve = plot_curve(self.run_dir)
        except NoSpaceError:
            missing.append("learning_curve.png")
        self.meta.update(end=now_iso(), final_update=state.updates, final_frames=state.frames, exit_status=status,
                         stage_seconds_rank0={**sim_s, **learn_s}, rollbacks=state.rollbacks, lr_scale=state.lr_scale)
        try:
            self.writer.write_json("meta.json", self.meta)
        except NoSpaceError:
            missing.append("meta.json")
        print_timers(sim_s, learn_s, time.time() - state.t_start)
        left = f"; not updated for want of room: {', '.join(missing)}" if missing else ""
        if status == EXIT_NO_SPACE:
            assert no_space is not None
            newest = ckpt.list_all(os.path.join(self.run_dir, "checkpoints"))
            start = (f"from its newest checkpoint, {os.path.basename(newest[-1])}" if newest else
                     "from the beginning (no checkpoint was written)")
            if not final_written and newest:
                start += ", and trains the updates after it again"
            print(f"ba3c: error: stopped at update {state.updates:,}: checkpoint {no_space.describe()}; "
                  f"{no_space.to_free()}, then --resume {self.run_dir} (it continues {start}); exit status "
                  f"{EXIT_NO_SPACE}{left}", file=sys.stderr, flush=True)
            return
        if missing:
            print(f"ba3c: warning: {', '.join(missing)} not updated for want of room ({no_space_dir(self.run_dir)})",
                  file=sys.stderr, flush=True)
        if status == EXIT_COLLAPSED:
            print(f"ba3c: stopped at update {state.updates:,}: the policy kept collapsing (see above); the final "
                  f"checkpoint holds the snapshot it was rolled back to", flush=True)
        elif stopped_early:
            why = "by signal" if status == EXIT_SIGNALLED else f"after --max-minutes {self.run_cfg.max_minutes}"
            print(f"ba3c: stopped {why} at update {state.updates:,}; continue with --resume {self.run_dir}", flush=True)
        else:
            print(f"ba3c: done: {state.frames:,} frames, {state.updates:,} updates"
                  + (f"; curve {curve}" if curve else ""), flush=True)
