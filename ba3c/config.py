"""Frozen configuration dataclasses (the schema), their validation, the CLI built from them, and JSON I/O.

The batch and learning-rate arithmetic (global batch, lr rules) is `ba3c.batching`; the history of removed
options is `ba3c.removed`.

Every option of `python -m ba3c.train` is a field below; its help text is the field's `help`
metadata. Precedence (lowest first): field defaults, the algorithm's (`ALGO_DEFAULTS`, by --algo),
`--config FILE.json`, `--preset NAME` (only when given on the command line), explicit command-line flags.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ba3c.batching import LR_SCALINGS, MAX_GLOBAL_BATCH, data_ranks, global_batch
from ba3c.files import write_json
from ba3c.removed import removed_behaviours, removed_message, without_removed

MODELS = ("auto", "nature", "paper", "mlp")
CLIP_MODES = ("global", "avg")
DIST_BACKENDS = ("auto", "horovod", "mpi", "none")
ALLREDUCES = ("grouped", "per-tensor")
COMPRESSIONS = ("none", "fp16")
GUARD_MODES = ("rollback", "warn", "off")
LIFE_LOSS_MODES = ("auto", "ignore", "terminal")
MAX_SEED = 2**31 - 1  # ALE takes its seeds as 32-bit signed integers (TensorFlow's seeding: 32-bit unsigned)
MAX_EPISODE_FRAMES = 2**31 - 1  # ALE counts an episode's frames in a 32-bit signed integer
MAX_THREADS = 1024  # per thread pool: more than any one node's cores (TensorFlow takes no more than 2**31 - 1)


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the option and what would be valid."""


def _f(default: Any, help: str, *, doc: str = "", experimental: bool = False, **kw: Any) -> Any:
    """A config field: `help` is its one line in --help; `doc` the longer story, on the configuration page only
    (ba3c.config_doc); `experimental` lists it in --help's experimental group (its benefit is not established)."""
    return field(default=default, metadata={"help": help, "doc": doc, "experimental": experimental, **kw})


@dataclass(frozen=True)
class SimConfig:
    """Simulators: which game, how many emulators per rank and how they are batched."""

    env: str = _f("pong", "game (pong, breakout, ALE/Pong-v5, ...) or a gymnasium id (CartPole-v1)", metavar="NAME",
                  doc="Any ALE game by its ROM id (pong, breakout, space_invaders, boxing, seaquest, beam_rider, ...), "
                      "by ALE name (Pong, ALE/Pong-v5), or any gymnasium environment with discrete actions "
                      "(CartPole-v1). A resume may not change it.")
    num_envs: int = _f(32, "simulators per rank")
    predict_batch: int = _f(16, "environments per predictor batch (below --num-envs: asynchronous simulation)",
                            doc="Equal to --num-envs, every simulator steps together (synchronous simulation); "
                                "smaller, the simulators are served in batches of this many as they become ready.")
    env_threads: int = _f(0, "emulator threads per rank (0: one per core available to the rank)")
    max_episode_frames: int = _f(108_000, "episode cap in emulator frames (Atari; a truncation, bootstrapped)")
    seed: int = _f(0, "base seed: rank r seeds its simulators with seed + r",
                   doc="Every rank builds the same model from it.")
    life_loss: str = _f("auto", "what a lost life means to the learner (Atari): auto, ignore or terminal",
                        doc="ignore: returns run on to the game's end and the agent must press FIRE itself. "
                            "terminal: a lost life ends the bootstrapped return, and FIRE is pressed for the agent "
                            "after it in games that have FIRE. Episode statistics are per full game either way. "
                            "auto: terminal for Atari games (it learned Breakout faster in both seeds measured), "
                            "ignore for environments without lives; the run's config.json records which. Runs saved "
                            "before the option existed resume and evaluate as ignore.", choices=LIFE_LOSS_MODES)
    decorrelate_steps: int = _f(0, "random-action steps at start that put fixed-length games out of step (0: off)",
                                doc="At each start (and resume) every simulator plays N steps of uniformly random "
                                    "actions, not trained on (their frames are counted), and restarts its game at a "
                                    "random one of them, so that games of a fixed length (Boxing: 1,783 agent steps) "
                                    "do not stay in step and fill every batch from one moment of the game; the games "
                                    "under way then are left out of the episode statistics. Atari with synchronous "
                                    "simulation (--predict-batch equal to --num-envs) only. Measured: one Boxing run "
                                    "with it (lr 5e-4) lost its features and never learned, so whether it helps is "
                                    "not settled.", experimental=True)
    sticky_actions: float = _f(0.0, "train with ALE's repeat_action_probability P (Atari; 0: none)",
                               doc="The chance that each emulator frame repeats the previous action instead of the "
                                   "agent's; 0.25 as in the BA3C authors' gym *-v0 games (and ALE v5's default); 0 "
                                   "(the default) as DQN's. Evaluation is set apart: --eval-sticky-actions and "
                                   "ba3c.evaluate --sticky-actions. Measured once (Pong, one seed, 27.2 M frames, "
                                   "trained with 0.25): 50 games 13.40 with sticky actions, 19.70 without.",
                               experimental=True)


@dataclass(frozen=True)
class LearnConfig:
    """Network, returns and optimizer."""

    algo: str = _f("ba3c", "algorithm: ba3c (Batch A3C) or gorila (distributed DQN, Nair et al. 2015)",
                   doc="gorila: every rank is a Gorila bundle, an actor (epsilon-greedy on the rank's live "
                       "Q-network), its shard of the replay memory and a learner (the DQN loss against a target "
                       "network) whose gradients every rank averages, as BA3C's are (docs/gorila.md). Its own "
                       "settings are the gorila group's; for shared options it sets other defaults (the algorithm "
                       "defaults listed at the top of this page) under --config, --preset and flags. A plug-in "
                       "algorithm is named by its import path, module.path:ClassName (docs/architecture.md). A "
                       "resume may not change it.", metavar="NAME")
    model: str = _f("auto", "network: auto (nature for images, mlp for vectors), nature, paper, mlp",
                    doc="paper is the BA3C authors' network, about 10x slower per sample on CPU than the Nature CNN; "
                        "--preset paper does not change the network. A resume may not change it.", choices=MODELS)
    n_step: int = _f(5, "n-step return horizon")
    gamma: float = _f(0.99, "discount")
    train_batch: int = _f(64, "samples per rank per update (global batch: train_batch x ranks)",
                          doc="The global batch (with --rehearse-ranks: x K) may not exceed 4096, twice the paper's "
                              "largest; beyond it Adam would need retuning not done here.")
    lr: float = _f(5e-4, "Adam learning rate at the reference global batch (--lr-ref-batch)")
    # The paper's betas and epsilon (arXiv 1801.02852): with beta2 0.999 a gradient spike moved a quiet weight ~32 lr
    # and Breakout collapsed in 4 of 4 runs; with 0.75, ~5 lr and none in 3 (docs/record/2026-12-optimizer.md).
    beta1: float = _f(0.8, "Adam beta1")
    beta2: float = _f(0.75, "Adam beta2")
    adam_eps: float = _f(1e-8, "Adam epsilon")
    clip_norm: float = _f(0.5, "gradient clipping threshold (0: off)")
    clip_mode: str = _f("global", "global: clip by global norm; avg: each tensor by its average norm (paper)",
                        choices=CLIP_MODES)
    entropy_coef: float = _f(0.01, "entropy bonus weight")
    value_coef: float = _f(0.5, "value loss weight")
    allreduce: str = _f("grouped", "how a synchronous update's gradients are exchanged: grouped or per-tensor",
                        doc="grouped: one exchange after the last gradient (Horovod's grouped op, mpi4py's flat "
                            "buffer). per-tensor: each gradient's allreduce starts as soon as backprop produces it, "
                            "the dense layer's (most of the bytes) first, so that it overlaps the convolutions' "
                            "backprop; needs --inter-op-threads of 2 or more. Measured on 2 ranks x 1 core: with "
                            "Horovod per-tensor saved nothing over grouped; with --dist mpi it is much faster than "
                            "the flat buffer.", choices=ALLREDUCES, experimental=True)
    compression: str = _f("none", "gradients on the wire: none (float32) or fp16",
                          doc="fp16 sends half the bytes and rounds the average to float16 precision. Measured: with "
                              "Horovod fp16 cut the exposed exchange by a quarter to a half; with --dist mpi it is "
                              "many times slower (the float16 sum runs in numpy).",
                          choices=COMPRESSIONS, experimental=True)
    lr_scaling: str = _f("sqrt", "lr rule for global batch B: none, linear (B/ref), sqrt (sqrt(B/ref))",
                         doc="ref is --lr-ref-batch; the global batch counts rehearsed ranks.", choices=LR_SCALINGS)
    lr_ref_batch: int = _f(64, "global batch at which --lr applies unchanged")
    warmup_updates: int = _f(100, "linear lr warm-up over this many updates when the rule raises the lr")
    noise_scale_every: int = _f(0, "measure the gradient noise scale every N updates, into progress.csv (0: off)",
                                doc="A diagnostic: the simple noise scale B_simple = tr(Sigma) / |G|^2 of McCandlish "
                                    "et al. 2018, about the batch beyond which more samples per update stop saving "
                                    "updates, from the squared gradient norms of the rank's batch and of its "
                                    "sub-batches (a rehearsal's: one per rehearsed rank; else 4 of --train-batch / "
                                    "4), for the whole loss and for its policy term. Costs one more forward and two "
                                    "more backward passes of the batch (in sub-batches) at those updates.",
                                experimental=True)


@dataclass(frozen=True)
class RunConfig:
    """Length of the run, output, threads and distribution."""

    total_frames: int = _f(10_000_000, "emulator frames to train, all ranks together (Atari: 4 per agent step)")
    run_dir: str = _f("", "run directory (default runs/<game>-<timestamp>)", metavar="DIR")
    resume: str = _f("", "continue the run in this directory from its newest checkpoint", metavar="DIR",
                     doc="The run's config.json is the starting point; flags given with --resume change it (except "
                         "--env and --model), and the changes are printed and recorded in meta.json.")
    preset: str = _f("default", "optimizer preset: default (tuned here) or paper (arXiv 1801.02852)",
                     doc="Applied only when given on the command line, over --config and under explicit flags; the "
                         "presets' values are listed at the top of this page.", choices=("default", "paper"))
    max_minutes: float = _f(0.0, "stop cleanly (checkpoint, exit 0) after this many minutes of training (0: no limit)")
    hang_timeout_min: float = _f(10.0, "2+ ranks: abort the job when no update completes for this many minutes",
                                 doc="A lost or stuck rank would otherwise hold the others in the allreduce for "
                                     "ever.")
    eval_every_frames: int = _f(0, "evaluate on rank 0 every this many frames, in a background thread (0: off)")
    eval_episodes: int = _f(10, "episodes per periodic evaluation")
    eval_policy: str = _f("paper", "periodic evaluation protocol: paper, greedy, sampled, egreedy",
                          doc="paper: the BA3C authors' (argmax, a random action with probability 0.001, action 1 "
                              "(FIRE) after 30 identical choices in a row, episodes capped at 40,000 agent steps); "
                              "greedy: plain argmax, capped at --max-episode-frames; sampled: actions drawn from the "
                              "policy; egreedy: random with probability 0.05 (DQN, Gorila).",
                          choices=("paper", "greedy", "sampled", "egreedy"))
    eval_sticky_actions: float = _f(0.0, "periodic evaluation with ALE's repeat_action_probability P (Atari)",
                                    doc="0 <= P < 1; 0 plays the training environment, 0.25 the BA3C authors' gym "
                                        "*-v0.")
    log_interval_s: float = _f(5.0, "seconds between progress lines")
    checkpoint_interval_min: float = _f(10.0, "minutes between checkpoints (one is always written at the end)")
    keep_checkpoints: int = _f(3, "checkpoints kept")
    checkpoint_max_failures: int = _f(3, "checkpoints in a row a full disk may refuse before the run stops (exit 74)",
                                      doc="A checkpoint that cannot be written (no space, quota, I/O error) leaves no "
                                          "file behind and the older checkpoints as they were; training goes on and "
                                          "the next --checkpoint-interval-min tries again. After this many failures in "
                                          "a row the run stops with exit status 74 and names what to free; --resume "
                                          "continues from the newest checkpoint.")
    keep_every_frames: int = _f(0, "also keep the first checkpoint past every multiple of this many frames (0: off)",
                                doc="Kept as keep-<update>.npz; rotation never deletes these, so a good state always "
                                    "survives.")
    intra_op_threads: int = _f(0, "TensorFlow intra-op threads (0: cores available to the rank)")
    inter_op_threads: int = _f(0, "TensorFlow inter-op threads (0: 2)",
                               doc="With 1, a per-tensor --allreduce only starts after backprop (its ops wait behind "
                                   "it for the one thread).")
    queue_batches: int = _f(2, "train batches buffered between simulation and learner (bounds policy lag)")
    dist: str = _f("auto", "gradient exchange backend: auto, horovod, mpi, none",
                   doc="auto: Horovod if it was built with MPI, else mpi4py when launched by mpirun, else none. The "
                       "choice is printed and saved in meta.json.", choices=DIST_BACKENDS)
    stats_interval_updates: int = _f(20, "updates between gathers of episode statistics from all ranks")
    rehearse_ranks: int = _f(1, "each process plays K ranks' part, to rehearse a run on K x the ranks (1: off)",
                             doc="K x simulators and K x the train batch per update; the lr, warm-up and frame "
                                 "counts are those the real run on K x the ranks computes.")
    collapse_guard: str = _f("rollback", "on a policy collapse: rollback (to a healthy snapshot, lower lr) or warn",
                             doc="A collapse: the policy entropy falls below --guard-entropy-floor, or to "
                                 "--guard-entropy-drop of its recent level. rollback restores the weights and Adam "
                                 "state of a healthy in-memory snapshot and goes on with a lower lr; warn only "
                                 "reports it; off: no guard (Gorila's default: a Q-network has no policy "
                                 "entropy to watch).", choices=GUARD_MODES)
    guard_snapshot_updates: int = _f(200, "updates between the guard's in-memory snapshots",
                                     doc="Taken at healthy sync points; a rollback returns to the older of the last "
                                         "two (one to two such spans back).")
    guard_entropy_floor: float = _f(1e-3, "policy entropy (nats) below which the policy has collapsed",
                                    doc="The mean over a sync interval.")
    guard_entropy_drop: float = _f(0.1, "collapsed also below this fraction of the recent median entropy",
                                   doc="The median over the last 10 sync intervals that were not collapsed.")
    guard_grad_jump: float = _f(5.0, "largest-gradient-norm jump (x recent median) that makes an interval suspect",
                                doc="The median over the last 10 intervals that were not collapsed; no snapshot is "
                                    "taken from a suspect interval.")
    guard_lr_cut: float = _f(0.5, "lr multiplier after each rollback, for the rest of the run",
                             doc="Kept in checkpoints; a resume that changes the lr drops it.")
    guard_max_rollbacks: int = _f(3, "rollbacks to one snapshot before the run gives up (exit status 3)",
                                  doc="The run then saves that snapshot as its final checkpoint.")


@dataclass(frozen=True)
class GorilaConfig:
    """Gorila mode (--algo gorila): replay memory, learning schedule, target network, exploration."""

    replay_size: int = _f(1_000_000, "transitions in each rank's replay memory (Gorila: 1 M per bundle)",
                          doc="Gorila's replay memory per bundle and CleanRL dqn_atari's buffer_size. Atari frames "
                              "are stored once (84 x 84 bytes) and stacked when sampled: 1 M is about 7 GB per rank, "
                              "checked against the host's memory before anything starts. The count is of frames "
                              "stored, which also holds the 3 frames shown before each episode's first observation.")
    learning_starts: int = _f(80_000, "agent steps each rank plays into its replay before its first update",
                              doc="CleanRL dqn_atari: 80,000. Played again after every resume (at the current "
                                  "epsilon; they count in --total-frames), less the transitions a rank loads from "
                                  "the replay memory saved at the end of the previous process (--replay-save end).")
    train_every: int = _f(4, "agent steps per rank per update (CleanRL, Nature DQN: 4)",
                          doc="The replay ratio: --train-batch samples per this many agent steps (32 per 4, 8 per "
                              "step, CleanRL's and Nature DQN's). Kept fixed: the learner waits for the actor, and "
                              "the actor waits when it is --queue-batches predictor batches ahead of the learner.")
    target_every: int = _f(250, "updates between copies of the network into the target network",
                           doc="CleanRL dqn_atari copies every 1,000 agent steps, 250 updates at one update per 4 "
                               "steps; Nature DQN every 10,000 updates. A hard copy, at the same update on every "
                               "rank.")
    eps_start: float = _f(1.0, "exploration epsilon at the start (CleanRL, Nature DQN: 1)")
    eps_end: float = _f(0.01, "exploration epsilon after --eps-decay-steps (CleanRL: 0.01; Nature DQN: 0.1)")
    eps_decay_steps: int = _f(1_000_000, "agent steps, all ranks together, over which epsilon falls linearly",
                              doc="CleanRL dqn_atari: 10% of its 10 M agent steps (Nature DQN: 1 M frames seen, also "
                                  "agent steps). The schedule follows the run's agent steps across resumes.")
    dqn_loss: str = _f("mse", "TD loss: mse (CleanRL dqn_atari) or huber (Nature DQN's clipped error)",
                       doc="mse learned CartPole sooner than huber in 15 of 20 seeds (studies/dqn_loss), and with "
                           "huber Gorila's Breakout run here diverged: from ~6 M frames the Q-values of rare "
                           "states (the ball above the bricks) grew past 100, the most any state can be worth with "
                           "rewards clipped to 1, up to ~16,000, and the training return fell from 93 to 23 by 8 M "
                           "frames (docs/gorila.md). The Pong run here trained with huber.",
                       choices=("huber", "mse"))
    dqn_target: str = _f("max", "the bootstrap: max (DQN) or double (Double DQN, van Hasselt et al. 2016)",
                         doc="max: r + gamma max_a Q_target(s', a); double: r + gamma Q_target(s', argmax_a Q(s', a)). "
                             "Off by default: on CartPole it learned no sooner and ended lower (studies/dqn_loss, 10 "
                             "seeds: the mean-20 return over the run higher in 4 with huber, 5 with mse; the last "
                             "one lower in 7 with each); not measured on Atari.",
                         choices=("max", "double"))
    replay_save: str = _f("off", "off, or end: save each rank's replay memory when the process ends, for --resume",
                          doc="end: every rank writes its replay shard to RUN_DIR/replay/rankR after the final "
                              "checkpoint (7 GB per rank at --replay-size 1000000), whether the run finished or "
                              "was stopped, and a --resume on the same ranks loads it instead of playing "
                              "--learning-starts again. A disk without room skips it with a line. Off by default "
                              "for that disk use (docs/gorila.md: measured costs).", choices=("off", "end"))

    def check(self) -> None:
        """This group's own values (whichever --algo: every saved config carries the group)."""
        for name in ("replay_size", "train_every", "target_every"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{_flag(name)}: must be > 0, got {getattr(self, name)}")
        for name in ("learning_starts", "eps_decay_steps"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{_flag(name)}: must be >= 0, got {getattr(self, name)}")
        for name in ("eps_start", "eps_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{_flag(name)}: must be in [0, 1] (a probability of a random action), got "
                                  f"{getattr(self, name)}")


@dataclass(frozen=True)
class Config:
    sim: SimConfig = field(default_factory=SimConfig)
    learn: LearnConfig = field(default_factory=LearnConfig)
    run: RunConfig = field(default_factory=RunConfig)
    gorila: GorilaConfig = field(default_factory=GorilaConfig)

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    def replace(self, **flat: Any) -> Config:
        """A copy with some flat option names (e.g. lr=1e-3) changed."""
        groups: dict[str, dict[str, Any]] = {g: {} for g in _GROUPS}
        for name, value in flat.items():
            groups[_owner(name)][name] = value
        return Config(**{g: dataclasses.replace(getattr(self, g), **kw) for g, kw in groups.items()})


_GROUPS: dict[str, type] = {"sim": SimConfig, "learn": LearnConfig, "run": RunConfig, "gorila": GorilaConfig}

# Options added after runs were saved, and the value a saved config that lacks one ran with (which
# need not be today's default): a resume or an evaluation of an old run keeps what it trained with.
IMPLIED_BY_OLDER_CONFIGS: dict[str, Any] = {"life_loss": "ignore", "allreduce": "grouped", "compression": "none",
                                             "noise_scale_every": 0,
                                             "decorrelate_steps": 0,
                                             "sticky_actions": 0.0, "checkpoint_max_failures": 3}
# Runs saved before Gorila mode existed are BA3C runs; the gorila group's defaults stand in for its options there.
IMPLIED_BY_OLDER_CONFIGS.update(algo="ba3c", **{f.name: f.default for f in fields(GorilaConfig)})

# The paper's optimizer settings (the authors' released code, deepsense-ai/Distributed-BA3C). The network is not
# part of it: add --model paper for theirs (10x slower per sample on CPU than the Nature CNN).
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "paper": dict(lr=1e-3, beta1=0.8, beta2=0.75, adam_eps=1e-8, clip_norm=0.1, clip_mode="avg",
                  train_batch=32, entropy_coef=0.01, n_step=5, gamma=0.99, predict_batch=16, lr_scaling="none"),
}


def _owner(name: str) -> str:
    for g, cls in _GROUPS.items():
        if name in {f.name for f in fields(cls)}:
            return g
    raise ConfigError(f"unknown option '{name}'" + _suggest(name, all_option_names()))


def all_option_names() -> list[str]:
    return [f.name for cls in _GROUPS.values() for f in fields(cls)]


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def field_type(f: Any) -> type:
    """The Python type of a config dataclass field (annotations are strings under `from __future__ import
    annotations`)."""
    return f.type if isinstance(f.type, type) else {"int": int, "float": float, "str": str}[f.type]


def validate(cfg: Config) -> None:
    """Reject configurations that cannot run, naming the option and what would be valid."""
    _check_types(cfg)
    _check_ranges(cfg)
    _check_combinations(cfg)
    cfg.gorila.check()


def _check_types(cfg: Config) -> None:
    """Every field of every group has its type (an int where a float goes is fine), and its choices."""
    for group in (cfg.sim, cfg.learn, cfg.run, cfg.gorila):
        for f in fields(group):
            v = getattr(group, f.name)
            want = field_type(f)
            if want is float and isinstance(v, int) and not isinstance(v, bool):
                continue
            if not isinstance(v, want) or isinstance(v, bool):
                raise ConfigError(f"{_flag(f.name)}: expected {want.__name__}, got {v!r}")
            if want is float and not math.isfinite(v):
                raise ConfigError(f"{_flag(f.name)}: must be a finite number, got {v!r}")
            choices = f.metadata.get("choices")
            if choices and v not in choices:
                raise ConfigError(f"{_flag(f.name)}: '{v}' is not one of {', '.join(choices)}")


def _check_ranges(cfg: Config) -> None:
    """Each value on its own: positive, non-negative, at most what the emulators and thread pools take."""
    s, l, r = cfg.sim, cfg.learn, cfg.run
    positive = dict(num_envs=s.num_envs, predict_batch=s.predict_batch, max_episode_frames=s.max_episode_frames,
                    n_step=l.n_step, train_batch=l.train_batch, lr=l.lr, lr_ref_batch=l.lr_ref_batch,
                    total_frames=r.total_frames, log_interval_s=r.log_interval_s,
                    checkpoint_interval_min=r.checkpoint_interval_min, hang_timeout_min=r.hang_timeout_min,
                    keep_checkpoints=r.keep_checkpoints, checkpoint_max_failures=r.checkpoint_max_failures,
                    queue_batches=r.queue_batches, eval_episodes=r.eval_episodes,
                    stats_interval_updates=r.stats_interval_updates,
                    adam_eps=l.adam_eps, rehearse_ranks=r.rehearse_ranks,
                    guard_snapshot_updates=r.guard_snapshot_updates, guard_grad_jump=r.guard_grad_jump,
                    guard_max_rollbacks=r.guard_max_rollbacks)
    for name, v in positive.items():
        if v <= 0:
            raise ConfigError(f"{_flag(name)}: must be > 0, got {v}")
    nonneg = dict(eval_every_frames=r.eval_every_frames, keep_every_frames=r.keep_every_frames,
                  guard_entropy_floor=r.guard_entropy_floor, max_minutes=r.max_minutes, env_threads=s.env_threads,
                  seed=s.seed, clip_norm=l.clip_norm, entropy_coef=l.entropy_coef,
                  value_coef=l.value_coef, warmup_updates=l.warmup_updates, noise_scale_every=l.noise_scale_every,
                  intra_op_threads=r.intra_op_threads, inter_op_threads=r.inter_op_threads,
                  decorrelate_steps=s.decorrelate_steps)
    for name, v in nonneg.items():
        if v < 0:
            raise ConfigError(f"{_flag(name)}: must be >= 0, got {v}")
    threads = "more threads than any one node has cores"
    at_most = dict(seed=(s.seed, MAX_SEED, "emulators and TensorFlow take 32-bit seeds"),
                   max_episode_frames=(s.max_episode_frames, MAX_EPISODE_FRAMES, "ALE counts frames in 32 bits"),
                   env_threads=(s.env_threads, MAX_THREADS, threads), intra_op_threads=(r.intra_op_threads, MAX_THREADS,
                   threads), inter_op_threads=(r.inter_op_threads, MAX_THREADS, threads))
    for name, (v, most, why) in at_most.items():
        if v > most:
            raise ConfigError(f"{_flag(name)}: must be at most {most} ({why}), got {v}")
    for name in ("guard_entropy_drop", "guard_lr_cut"):
        if not 0.0 < getattr(r, name) < 1.0:
            raise ConfigError(f"{_flag(name)}: must be in (0, 1), got {getattr(r, name)}")
    for name in ("beta1", "beta2"):
        if not 0.0 <= getattr(l, name) < 1.0:
            raise ConfigError(f"--{name}: must be in [0, 1), got {getattr(l, name)}")
    if not 0.0 < l.gamma <= 1.0:
        raise ConfigError(f"--gamma: must be in (0, 1], got {l.gamma}")


def _check_combinations(cfg: Config) -> None:
    """Values that cannot go together (one process: the number of ranks is checked by check_world later)."""
    s, l, r = cfg.sim, cfg.learn, cfg.run
    for option, p in (("--sticky-actions", s.sticky_actions), ("--eval-sticky-actions", r.eval_sticky_actions)):
        if (problem := sticky_actions_problem(option, p)) is not None:
            raise ConfigError(problem)
    if s.decorrelate_steps and s.predict_batch != s.num_envs:
        raise ConfigError(f"--decorrelate-steps {s.decorrelate_steps}: ALE restarts single games only in synchronous "
                          f"simulation; set --predict-batch equal to --num-envs ({s.num_envs}), now {s.predict_batch}")
    if s.predict_batch > s.num_envs:
        raise ConfigError(f"--predict-batch {s.predict_batch} is larger than --num-envs {s.num_envs}; "
                          f"use at most {s.num_envs} (or raise --num-envs)")
    if l.train_batch > MAX_GLOBAL_BATCH:
        raise ConfigError(f"--train-batch {l.train_batch} exceeds the global batch limit {MAX_GLOBAL_BATCH}")
    check_world(cfg, 1)
    # Each train sample is one agent step; a rank needs at least one full n-step segment of its
    # simulators to fill a batch without waiting on a single environment for ever.
    if l.train_batch > s.num_envs * l.n_step * 64:
        raise ConfigError(f"--train-batch {l.train_batch} cannot be filled in reasonable time by --num-envs "
                          f"{s.num_envs} x --n-step {l.n_step}; raise --num-envs or lower --train-batch")
    # An episode must be able to hold one n-step segment (Atari: 4 frames per agent step).
    if l.n_step * 4 > s.max_episode_frames:
        raise ConfigError(f"--n-step {l.n_step} is longer than the episode cap --max-episode-frames "
                          f"{s.max_episode_frames} allows; lower --n-step or raise the cap")
    if l.noise_scale_every and r.rehearse_ranks == 1 and l.train_batch < 8:
        raise ConfigError(f"--noise-scale-every needs sub-batches of at least 2 samples: --train-batch {l.train_batch} "
                          f"/ 4 is less; raise --train-batch to 8 or more, or rehearse ranks (--rehearse-ranks)")


def check_world(cfg: Config, world_size: int) -> None:
    """Checks that need the number of ranks (run before any expensive start-up)."""
    gb, ranks = global_batch(cfg, world_size), data_ranks(cfg, world_size)
    if gb > MAX_GLOBAL_BATCH:
        rehearsal = f" x --rehearse-ranks {cfg.run.rehearse_ranks}" if cfg.run.rehearse_ranks > 1 else ""
        what = f"{world_size} ranks{rehearsal}"
        # only fixes that can be applied: each of them is at least 1
        fixes = [f"lower --train-batch to at most {MAX_GLOBAL_BATCH // ranks}"] if ranks <= MAX_GLOBAL_BATCH else []
        if cfg.run.rehearse_ranks > 1 and world_size * cfg.learn.train_batch <= MAX_GLOBAL_BATCH:
            most = MAX_GLOBAL_BATCH // (world_size * cfg.learn.train_batch)
            fixes.append(f"lower --rehearse-ranks to at most {most}")
        if not fixes:
            fixes.append(f"run on at most {MAX_GLOBAL_BATCH // cfg.learn.train_batch} ranks")
        raise ConfigError(f"global batch {cfg.learn.train_batch} x {what} = {gb} exceeds {MAX_GLOBAL_BATCH}; "
                          f"{' or '.join(fixes)}")


def sticky_actions_problem(option: str, p: float, env_kind: str = "atari", env_name: str = "") -> str | None:
    """Why `p` is no repeat-action probability ALE can play (0 <= p < 1; 1 would never take an action; Atari only),
    or None. Callers raise their own error type (ConfigError for the trainer, EvalError for ba3c.evaluate)."""
    if not (isinstance(p, (int, float)) and 0.0 <= p < 1.0):  # also rejects nan
        return (f"{option}: must be in [0, 1) (the probability that an emulator frame repeats the previous action; "
                f"0.25 in the BA3C authors' gym *-v0 environments), got {p}")
    if p and env_kind != "atari":
        return f"{option} {p}: sticky actions are an ALE setting; {env_name or env_kind} is not an Atari game (use 0)"
    return None


# ---------------------------------------------------------------- CLI and JSON

class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes become a ConfigError: one line from the entry point, not the whole usage text (ba3c.train's
    parser and ba3c.evaluate's)."""

    def error(self, message: str) -> Any:  # argparse's signature says NoReturn
        raise ConfigError(f"{message} (see --help)")


EXPERIMENTAL_GROUP = ("experimental", "Opt-in options whose benefit the measurements here did not establish, and "
                      "diagnostics; docs/configuration.md says what was measured.")
_METAVARS = {int: "N", float: "X", str: "TEXT"}


def build_parser(prog: str = "python -m ba3c.train") -> argparse.ArgumentParser:
    """The CLI: one option per config field, in its dataclass's group, or in the experimental group when the
    field says so (the saved JSON keeps the dataclass groups either way)."""
    p = OneLineParser(prog=prog, description="Distributed Batch A3C (BA3C) trainer. Every option with its longer "
                "explanation: docs/configuration.md.")
    p.add_argument("--config", default="", metavar="FILE",
                   help="JSON config file (as saved in a run directory); flags override it")
    groups = {gname: p.add_argument_group(gname, cls.__doc__) for gname, cls in _GROUPS.items()}
    experimental = p.add_argument_group(*EXPERIMENTAL_GROUP)
    for gname, cls in _GROUPS.items():
        for f in fields(cls):
            grp = experimental if f.metadata.get("experimental") else groups[gname]
            grp.add_argument(_flag(f.name), dest=f.name, type=field_type(f), default=argparse.SUPPRESS,
                             choices=f.metadata.get("choices"), help=f"{f.metadata['help']} (default: {f.default!r})",
                             metavar=None if f.metadata.get("choices") else
                             f.metadata.get("metavar", _METAVARS[field_type(f)]))
    return p


def _from_nested(data: dict[str, Any], source: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object with keys sim, learn, run")
    for key, value in data.items():
        if key in _GROUPS and isinstance(value, dict):
            for k, v in value.items():
                if _owner(k) != key:
                    raise ConfigError(f"{source}: '{k}' belongs to '{_owner(k)}', not '{key}'")
                flat[k] = v
        else:
            _owner(key)  # raises with a suggestion if unknown
            flat[key] = value
    return flat


def load_json(path: str) -> dict[str, Any]:
    fix = "give a JSON config file (a run directory's config.json is one)"
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--config: no such file '{path}'") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"--config: '{path}' is not valid JSON ({e}); {fix}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"--config: '{path}' is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
                          f"{fix}") from None
    except (OSError, ValueError) as e:  # a directory, no permission, a NUL in the name
        raise ConfigError(f"--config: cannot read '{path}' ({getattr(e, 'strerror', None) or e}); {fix}") from None
    if used := removed_behaviours(data):
        raise ConfigError(removed_message(f"--config {path}", used))
    return _from_nested(without_removed(data), f"--config {path}")


def save_json(cfg: Config, path: str) -> None:
    write_json(path, cfg.to_dict())


def config_from_dict(data: dict[str, Any]) -> Config:
    return Config().replace(**_from_nested(data, "config"))


def unknown_options(data: Any) -> list[str]:
    """The options in a saved config (nested by group, or flat) that this version does not have, as
    group.name (or name), in the file's order: a config written by a newer version or another branch."""
    if not isinstance(data, dict):
        return []
    known = set(all_option_names())
    out: list[str] = []
    for key, value in data.items():
        if key in _GROUPS and isinstance(value, dict):
            out += [f"{key}.{k}" for k in value if k not in known]
        elif key not in known:
            out.append(key)
    return out


def resolve_life_loss(cfg: Config, atari: bool) -> Config:
    """`--life-loss auto` made explicit for the environment: terminal for an Atari game, else ignore."""
    if cfg.sim.life_loss != "auto":
        return cfg
    return cfg.replace(life_loss="terminal" if atari else "ignore")


def saved_config(data: dict[str, Any], source: str = "saved config", remedy: str = "") -> Config:
    """The config a run saved (config.json, a checkpoint's meta), with the options it predates set to what it ran with.

    Options this version does not know (the run was made by a newer version or another branch) are all
    named in one ConfigError, from `source` (where the config came from) and with `remedy` (what to do).
    Removed options are dropped, whatever their value (a resume refuses removed behaviours first:
    `removed_behaviours`); an evaluation of such a run works, its network being the same."""
    data = without_removed(data)
    unknown = unknown_options(data)
    if unknown:
        what = "option" if len(unknown) == 1 else "options"
        raise ConfigError(f"{source} has {what} this version of ba3c does not know: {', '.join(unknown)} (the run was "
                          f"made by a newer version or another branch)" + (f"; {remedy}" if remedy else ""))
    try:
        return Config().replace(**{**IMPLIED_BY_OLDER_CONFIGS, **_from_nested(data, source)})
    except ConfigError as e:  # a known option with a value this version rejects (e.g. a choice it lacks)
        msg = str(e) if str(e).startswith(source) else f"{source}: {e}"
        raise ConfigError(msg + (f"; {remedy}" if remedy else "")) from None
