"""The library surface benchmarks and studies build on: a configuration's network, learner and update, timed
alone, and the gradient exchange between ranks, without reaching into the trainer's modules.

    from ba3c import api
    step = api.update_step(cfg, (4, 84, 84), 6)   # one update of the algorithm --algo names, single process
    step()                                         # -> samples trained

Everything here follows the configuration as the trainer does (the algorithm's head and loss, the lr rule);
nothing imports TensorFlow before it is called.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ba3c.algos import algorithm
from ba3c.batching import scaled_lr
from ba3c.config import Config, LearnConfig
from ba3c.dist import Dist, MpiDist
from ba3c.learner import noise_scale

__all__ = ["Dist", "MpiDist", "UpdateParts", "clip_gradients", "example_batch", "forward_step", "init_exchange",
           "learner", "mpi_exchange", "network", "noise_scale", "plain_learner", "samples_per_agent_step",
           "single_process", "update_parts", "update_step", "xla_learner"]


def single_process() -> Dist:
    """The exchange of one process: averages are the values themselves."""
    return Dist()


def init_exchange(backend: str = "auto") -> Dist:
    """The gradient exchange between the ranks this process was launched with (horovod, mpi, none or auto)."""
    from ba3c import dist as dist_mod

    return dist_mod.init(dist_mod.choose_backend(backend))


def mpi_exchange(horovod: bool = False) -> MpiDist:
    """The exchange over all the ranks mpirun started (mpi4py; with Horovod attached to it when `horovod`): its
    `comm` (MPI_COMM_WORLD) is there for probes that time collectives of their own."""
    from ba3c import dist as dist_mod

    world = dist_mod.init("horovod" if horovod else "mpi")
    assert isinstance(world, MpiDist)  # HorovodDist is one
    return world


def network(cfg: Config, obs_shape: tuple[int, ...], num_actions: int, kind: str = "",
            seed: int | None = None):  # -> keras.Model
    """The network the trainer builds for `cfg` (--model, or `kind`; its algorithm's head), seeded by --seed (or
    `seed`)."""
    from ba3c.model import build_model, resolve_model_kind

    kind = kind or resolve_model_kind(cfg.learn.model, obs_shape)
    return build_model(kind, obs_shape, num_actions, cfg.sim.seed if seed is None else seed,
                       head=algorithm(cfg.learn.algo).head)


def learner(cfg: Config, obs_shape: tuple[int, ...], num_actions: int, dist: Dist | None = None,
            world_size: int = 1, lr: float | None = None, kind: str = ""):  # -> ba3c.learner.Learner
    """The trainer's learner for `cfg` on `world_size` ranks: its network, its algorithm's loss, the lr its rule
    gives (or `lr`, without warm-up), exchanging through `dist` (default: one process)."""
    from ba3c.learner import Learner

    def build():  # -> keras.Model
        return network(cfg, obs_shape, num_actions, kind)

    model, l = build(), cfg.learn
    rate = scaled_lr(cfg, world_size) if lr is None else lr
    warmup = l.warmup_updates if lr is None and rate > l.lr else 0
    loss = algorithm(l.algo).make_loss(cfg, model, build)
    return Learner(model, l, dist or single_process(), rate, warmup, loss=loss)


def plain_learner(model, learn: LearnConfig, lr: float, dist: Dist | None = None):  # -> ba3c.learner.Learner
    """A learner of BA3C's loss for a network built elsewhere (timing the optimizer or the exchange alone)."""
    from ba3c.learner import Learner

    return Learner(model, learn, dist or single_process(), lr, 0)


def xla_learner(model, learn: LearnConfig, lr: float):  # -> ba3c.learner.Learner
    """`plain_learner` on one process with its fused step (gradients, clipping, optimizer) compiled by XLA
    (`jit_compile=True`): the A/B of an XLA-compiled update."""
    import tensorflow as tf

    from ba3c.learner import _packed

    out = plain_learner(model, learn, lr)
    out._fused = tf.function(lambda *b: _packed(tf, *out._fused_step(list, False, *b)), jit_compile=True)
    return out


def clip_gradients(grads: list, mode: str, threshold: float) -> tuple[list, Any]:
    """The learner's clipping (--clip-mode, --clip-norm) of a list of gradient tensors: the clipped gradients and
    the global norm before clipping. Traceable inside a tf.function."""
    import tensorflow as tf

    from ba3c.learner import _clip

    return _clip(tf, grads, mode, threshold)


@dataclass(frozen=True)
class UpdateParts:
    """A single-process learner's update taken apart, for probes that time each piece. The uncompiled pieces
    trace inside a tf.function of the caller's (to compile them differently, or alone)."""
    optimizer: Callable[[list], Any]  # compiled: clipping then the optimizer's step on gradients -> the global norm
    apply_grads: Callable[[list], Any]  # the same, uncompiled
    optimizer_step: Callable[[list], None]  # the optimizer's step alone (Adam's fused kernel), uncompiled
    loss_and_grads: Callable[..., tuple]  # the loss's forward and backward pass on its input tensors -> (grads, stats)
    fused_for: Callable[[tuple], Any]  # (input tensors) -> the compiled fused update's graph for their types


def update_parts(trainer_learner) -> UpdateParts:  # trainer_learner: ba3c.learner.Learner
    """The pieces of `trainer_learner`'s update (one made by `plain_learner` or `learner`, single process)."""
    l = trainer_learner
    return UpdateParts(l._apply, l._apply_grads, l._adam, l._loss_and_grads, l._fused_for)


def example_batch(cfg: Config, obs_shape: tuple[int, ...], num_actions: int, n: int | None = None,
                  seed: int = 0) -> Any:
    """A batch of `n` (default --train-batch) random observations of the kind the algorithm's loss takes."""
    rng = np.random.default_rng(seed)
    n = cfg.learn.train_batch if n is None else n
    obs = rng.integers(0, 256, size=(n, *obs_shape), dtype=np.uint8) if len(obs_shape) == 3 else \
        rng.normal(size=(n, *obs_shape)).astype(np.float32)
    return algorithm(cfg.learn.algo).example_batch(cfg, obs, num_actions, rng)


def update_step(cfg: Config, obs_shape: tuple[int, ...], num_actions: int) -> Callable[[], int]:
    """One update at --train-batch random samples, single process: call it to train once; returns the samples."""
    trainer_learner = learner(cfg, obs_shape, num_actions)
    batch = example_batch(cfg, obs_shape, num_actions)
    n = cfg.learn.train_batch

    def step() -> int:
        trainer_learner.train(batch)
        return n

    return step


def forward_step(cfg: Config, obs_shape: tuple[int, ...], num_actions: int) -> Callable[[], int]:
    """The trainer's predict stage at --predict-batch: the compiled forward pass and the algorithm's action
    choice; returns the samples."""
    from ba3c.predictor import Predictor

    algo = algorithm(cfg.learn.algo)
    dtype = np.dtype(np.uint8) if len(obs_shape) == 3 else np.dtype(np.float32)
    predictor = Predictor(network(cfg, obs_shape, num_actions), obs_shape, dtype)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, size=(cfg.sim.predict_batch, *obs_shape)).astype(dtype)

    def step() -> int:
        out, _ = predictor(obs)
        return len(algo.choose(out, rng))

    return step


def samples_per_agent_step(cfg: Config, frames_per_step: int = 4) -> float:
    """Train samples per agent step played (the replay ratio: 1 where each agent step is one sample)."""
    one_rank = cfg.learn.train_batch * frames_per_step
    return one_rank / algorithm(cfg.learn.algo).frames_per_update(cfg, 1, frames_per_step)
