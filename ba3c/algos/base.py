"""The algorithm interface: everything that differs between training algorithms, in one base class.

An algorithm says which network head it trains, how many frames one update stands for, what its loss is,
what a rank's simulation thread does with each step (its `Actor`), what extra memory a rank needs, which
evaluation protocol fits it and which options it owns or sets other defaults for. The trainer
(`ba3c.runner`) knows only this interface; `ba3c.algos` maps --algo to an implementation.

Shape of the parts (as in DQN Zoo's `parts.Agent` or Acme's acting / learning split):
* the loss (`make_loss`): `names` (its statistics, progress.csv columns), `inputs(batch)` (the batch's
  arrays it takes), `__call__(model, *inputs)` -> (loss, stacked statistics) in graph, `after_update(updates)`
  and `state_variables()` (what checkpoints carry besides the network and the optimizer: a target network);
* the actor (`make_actor`): the `experience` that records each predictor batch (`add(batch, values, actions,
  version)` -> (train batches, finished episodes)), the `feed` the learner takes its batches from
  (`hand_over`, `next_batch`, `discard_queued`) and `choose` (actions from the network's first output).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ba3c.batching import global_batch
from ba3c.config import ConfigError

if TYPE_CHECKING:
    from ba3c.config import Config
    from ba3c.dist import Dist
    from ba3c.simulators import Simulator


@dataclass(frozen=True)
class ActorContext:
    """What an algorithm's actor is built from: this rank's simulators and where the run stands."""

    sim: Simulator
    clip_rewards: bool  # Atari: rewards clipped to [-1, 1] for the learner
    rank: int
    ranks: int          # ranks whose data one update holds (rehearsed ones included)
    steps_before: int   # the run's agent steps so far, all ranks together (0 at the start)
    seed: int           # this rank's seed for the actor's own draws


@dataclass(frozen=True)
class MemoryCost:
    """What an algorithm keeps per rank beyond the shared estimate (ba3c.resources), and the option that sizes it."""

    bytes: int
    option: str = ""     # the flag to name when it does not fit, e.g. --replay-size
    value: int = 0       # that option's value now
    unit_bytes: int = 0  # bytes per unit of the option
    least: int = 0       # the smallest value that can run
    what: str = ""       # what it is, in words: "a replay memory"


class Actor:
    """What a rank's simulation thread does with each step, and how the learner gets its batches.

    The defaults are an actor that samples its policy and queues train batches (`feed` None: the simulation
    thread's bounded queue)."""

    experience: Any = None
    feed: Any = None
    decorrelate_steps: int = 0  # random-action steps at the start (SimConfig.decorrelate_steps), if supported

    def choose(self, out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Actions from the network's first output for a predictor batch (default: sample the policy)."""
        from ba3c.predictor import sample_actions

        return sample_actions(out, rng)

    @property
    def warmup_steps(self) -> int:
        """Agent steps this rank plays, in this process, before the learner's first batch (a replay warm-up)."""
        return 0

    def steps_played(self) -> int:
        """Agent steps this rank has played in this process (for the progress line during a warm-up)."""
        return 0

    def restore(self, run_dir: str, dist: Dist) -> None:
        """On resume, on every rank: what the actor kept beside the checkpoint (a saved replay memory)."""

    def describe(self) -> str:
        """Rank 0's line about the actor at the start ('' for none)."""
        return ""

    def stats(self) -> dict[str, float]:
        """The actor's numbers beside the loss's in progress.csv (an exploration rate)."""
        return {}

    def finish(self, run_dir: str, rank: int, updates: int) -> str:
        """At the end of the process, on every rank, after the final checkpoint; returns a line ('' for none)."""
        return ""


class Algorithm:
    """One training algorithm. Subclass it, set the class attributes and implement `make_loss` and `make_actor`."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # its name in tables and figures ("Gorila")
    head: ClassVar[str] = "actor_critic"  # ba3c.model.HEADS: actor_critic (logits, value) or q (Q, max Q)
    option_group: ClassVar[str | None] = None  # the config group it owns (Config.<group>), if any
    defaults: ClassVar[Mapping[str, Any]] = {}  # shared options' defaults under this --algo
    eval_policy: ClassVar[str] = "paper"  # the evaluation protocol ba3c.evaluate uses by default
    policy_gradient: ClassVar[bool] = False  # its loss has A2C's `terms` (--noise-scale-every measures them)
    quick_start_flags: ClassVar[tuple[str, ...]] = ()  # trainer flags that shorten a benchmark's start (a warm-up)

    def check(self, cfg: Config) -> None:
        """Raise ConfigError for what this algorithm cannot combine with (run before anything starts)."""
        if cfg.learn.noise_scale_every and not self.policy_gradient:
            raise ConfigError(f"--noise-scale-every {cfg.learn.noise_scale_every} does not go with --algo "
                              f"{cfg.learn.algo} (it measures a policy-gradient term); use --noise-scale-every 0")

    def frames_per_update(self, cfg: Config, world_size: int, frames_per_step: int) -> int:
        """Emulator frames one update stands for on `world_size` ranks (default: one agent step per sample)."""
        return global_batch(cfg, world_size) * frames_per_step

    def memory(self, cfg: Config, obs_shape: tuple[int, ...], itemsize: int) -> MemoryCost:
        """What a rank holds beyond the shared estimate (a replay memory), for the check before the start."""
        return MemoryCost(0)

    def value_bound(self, cfg: Config, clipped_rewards: bool) -> float | None:
        """The most a state can be worth, if the network's values are watched against it (else None)."""
        return None

    def choose(self, out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Actions as its actor chooses them, at a fixed exploration (timing the predict stage: ba3c.api)."""
        from ba3c.predictor import sample_actions

        return sample_actions(out, rng)

    def example_batch(self, cfg: Config, obs: np.ndarray, num_actions: int, rng: np.random.Generator) -> Any:
        """A train batch of random content around `obs`, of the kind its loss takes (timing an update: ba3c.api)."""
        from ba3c.experience import TrainBatch

        n = len(obs)
        return TrainBatch(obs, rng.integers(num_actions, size=n, dtype=np.int32), rng.normal(size=n).astype(np.float32),
                          rng.normal(size=n).astype(np.float32))

    def make_loss(self, cfg: Config, model: Any, build_network: Callable[[], Any]) -> Any:
        """The loss for `model`; `build_network()` builds the same network again (a target network)."""
        raise NotImplementedError

    def make_actor(self, cfg: Config, ctx: ActorContext) -> Actor:
        raise NotImplementedError
