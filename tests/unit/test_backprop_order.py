"""The per-tensor exchange's two-pass backprop (largest gradient and the layers after it first) gives
the same gradients and the same update as one pass; one process, the exchange stubbed as the identity."""
from __future__ import annotations

import numpy as np

from ba3c.config import LearnConfig
from ba3c.dist import Dist
from ba3c.experience import TrainBatch
from ba3c.learner import Learner
from ba3c.model import build_model


class TwoRanksInGraph(Dist):
    """Looks like two ranks averaging inside the graph, but every rank is this one (average = identity)."""

    def __init__(self) -> None:
        super().__init__()
        self.size = 2

    def averages_in_graph(self, per_tensor: bool) -> bool:
        return True


def test_two_pass_backprop_matches_one_pass():
    rng = np.random.default_rng(0)
    b = TrainBatch(rng.integers(0, 255, (8, 4, 84, 84), dtype=np.uint8), rng.integers(0, 6, 8).astype(np.int32),
                   rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32))
    # Adam's epsilon 1e-5, not the default 1e-8: at 1e-8 a gradient near zero whose two computations differ by
    # rounding (within the tolerance the gradients are compared with below) gets visibly different steps
    split = Learner(build_model("nature", (4, 84, 84), 6, seed=0), LearnConfig(allreduce="per-tensor", adam_eps=1e-5),
                    TwoRanksInGraph(), lr=1e-3, warmup_updates=0)
    plain = Learner(build_model("nature", (4, 84, 84), 6, seed=0), LearnConfig(allreduce="grouped", adam_eps=1e-5),
                    TwoRanksInGraph(), lr=1e-3, warmup_updates=0)
    sizes = [int(np.prod(v.shape)) for v in split.model.trainable_variables]
    assert split._late_from == int(np.argmax(sizes)) > 0 and plain._late_from is None
    assert sizes[split._late_from] == 3136 * 512  # the dense layer's kernel: it and the heads go first
    import tensorflow as tf

    args = tuple(tf.constant(x) for x in (b.obs, b.actions, b.returns, b.advantages))
    g_split, _ = split._grads(*args)
    g_plain, _ = plain._grads(*args)
    assert [tuple(g.shape) for g in g_split] == [tuple(v.shape) for v in split.model.trainable_variables]
    for a, c in zip(g_split, g_plain):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-5, atol=1e-7)
    for _ in range(2):
        split.train(b)
        plain.train(b)
    for a, c in zip(split.model.get_weights(), plain.model.get_weights()):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-7)
