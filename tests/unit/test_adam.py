"""The learner's gradient clipping (ba3c.learner._clip) against TensorFlow's, and its Adam (TensorFlow's fused
ResourceApplyAdam on the Keras optimizer's variables, Learner._adam): the same updates as
keras.optimizers.Adam.apply_gradients through warm-up, an lr cut and a rollback, and the same checkpoint layout
(network weights, then Keras Adam's variables)."""
from __future__ import annotations

import numpy as np
import pytest


def _learners(cfg_fields: dict, warmup: int):
    from ba3c.config import LearnConfig
    from ba3c.dist import Dist
    from ba3c.learner import Learner
    from ba3c.model import build_model

    class KerasAdamLearner(Learner):
        """The reference: Keras 3's own Adam on the same (clipped) gradients."""

        def _adam(self, grads: list) -> None:
            self.opt.apply_gradients(zip(grads, self.model.trainable_variables))

    cfg = LearnConfig(**cfg_fields)
    fused = Learner(build_model("mlp", (4,), 3, seed=2), cfg, Dist(), lr=3e-2, warmup_updates=warmup)
    keras_ = KerasAdamLearner(build_model("mlp", (4,), 3, seed=2), cfg, Dist(), lr=3e-2, warmup_updates=warmup)
    return fused, keras_


def _same_update(before: list[np.ndarray], a: list[np.ndarray], b: list[np.ndarray], what: str) -> None:
    """Both moved every array by the same amount, to float32 rounding. The kernel computes 1 - beta in float32
    (1 - float32(0.999) is 1.3e-5 above 0.001 relatively), Keras in double before the cast, so the two updates
    may differ by some 1e-5 of their size; a formula's difference (eps, bias correction) is far larger."""
    assert len(a) == len(b) == len(before)
    for i, (x, y, x0) in enumerate(zip(a, b, before)):
        assert x.shape == y.shape and x.dtype == y.dtype, f"{what}: array {i} has another shape or type"
        dx, dy = x.astype(np.float64) - x0, y.astype(np.float64) - x0
        np.testing.assert_allclose(dx, dy, rtol=5e-5, atol=1e-5 * float(np.abs(dy).max()), err_msg=f"{what}: array {i}")


@pytest.mark.parametrize("cfg_fields", [
    {},                                                                  # defaults: global clip 0.5
    dict(beta1=0.9, beta2=0.999, adam_eps=1e-5),                         # the default before issue 62
    dict(beta1=0.8, beta2=0.75, adam_eps=1e-8, clip_norm=0.1, clip_mode="avg"),  # the paper preset's
    dict(beta1=0.9, beta2=0.999, adam_eps=1e-8, clip_norm=0.0),          # Gorila's: no clipping
], ids=["defaults", "old-default", "paper", "no-clip"])
def test_fused_adam_equals_keras_adam(cfg_fields):
    from ba3c.experience import TrainBatch

    rng = np.random.default_rng(0)
    batches = [TrainBatch(rng.normal(size=(24, 4)).astype(np.float32), rng.integers(0, 3, 24).astype(np.int32),
                          rng.normal(size=24).astype(np.float32), rng.normal(size=24).astype(np.float32))
               for _ in range(14)]
    fused, ref = _learners(cfg_fields, warmup=6)  # the lr changes at every one of the first 6 updates
    # the checkpoint layout: Keras Adam's step count, lr, then each weight's momentum and velocity
    names = [v.path for v in fused.opt.variables]
    weights = fused.model.trainable_variables
    prefix = names[0].rsplit("/", 1)[0]  # adam
    assert names[:2] == [f"{prefix}/iteration", f"{prefix}/learning_rate"]
    assert names[2:] == [f"{prefix}/{w.path.replace('/', '_')}_{slot}"
                         for w in weights for slot in ("momentum", "velocity")]
    snapshot: list[np.ndarray] = []
    for step, b in enumerate(batches):
        if step == 4:
            snapshot = fused.state_arrays()
        if step == 8:  # a rollback as the collapse guard makes it: state back to update 4, lr cut, schedule back
            fused.load_state_arrays(snapshot, "the snapshot")
            fused.lr_step = int(fused.opt.iterations.numpy())
            fused.lr_scale = 0.5
            assert fused.lr_step == 4
        if step == 11:  # a second lr change without a restore (a second rollback's cut)
            fused.lr_scale = 0.35
        # each update from the same state (float32 rounding differences would grow over a trajectory)
        ref.load_state_arrays(fused.state_arrays(), "the fused learner's state")
        ref.lr_step, ref.lr_scale = fused.lr_step, fused.lr_scale
        before = fused.state_arrays()
        a, r = fused.train(b), ref.train(b)
        assert a.grad_norm == r.grad_norm and a.terms == r.terms  # the same gradients went in
        _same_update(before, fused.state_arrays(), ref.state_arrays(), f"update {step + 1}")
    assert int(fused.opt.iterations.numpy()) == 10  # 14 updates, 4 of them undone by the rollback
    moved = [np.abs(x - y).max() for x, y in zip(fused.state_arrays(), snapshot)]
    assert max(moved) > 1e-3  # the updates did move the weights


@pytest.mark.parametrize("mode,threshold", [("global", 50.0), ("global", 0.5), ("avg", 0.05), ("avg", 1e-4),
                                            ("global", 0.0)])
def test_clip_equals_tensorflows(mode, threshold):
    """ba3c.learner._clip (rescales only where a clip is active) against TensorFlow's clip_by_global_norm and the
    paper's per-tensor rule written plainly, with the clip active, inactive and (avg) active for some tensors."""
    import tensorflow as tf

    from ba3c.learner import _clip

    rng = np.random.default_rng(1)
    grads = [tf.constant(rng.normal(scale=s, size=shape).astype(np.float32))
             for s, shape in ((1.0, (3, 5)), (0.01, (5,)), (0.3, (40, 7)), (3.0, (7,)))]
    if mode == "global" and threshold > 0:
        expected, _ = tf.clip_by_global_norm(grads, threshold)
    elif mode == "avg":
        expected = [g * tf.minimum(1.0, threshold / tf.maximum(tf.norm(g) / tf.cast(tf.size(g), g.dtype), 1e-12))
                    for g in grads]
    else:
        expected = grads
    for fn in (lambda gs: _clip(tf, gs, mode, threshold), tf.function(lambda gs: _clip(tf, gs, mode, threshold))):
        clipped, norm = fn(list(grads))
        np.testing.assert_allclose(float(norm), float(tf.linalg.global_norm(grads)), rtol=1e-6)
        for c, e in zip(clipped, expected):
            np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-6, atol=0)
    clipped, _ = _clip(tf, list(grads), mode, threshold)
    scaled = [not np.array_equal(c.numpy(), g.numpy()) for c, g in zip(clipped, grads)]
    assert scaled == {("global", 50.0): [False] * 4, ("global", 0.5): [True] * 4, ("global", 0.0): [False] * 4,
                      ("avg", 0.05): [True, False, False, True], ("avg", 1e-4): [True] * 4}[(mode, threshold)]


def test_lr_variable_follows_the_schedule_after_a_restore():
    """The learner assigns Adam's lr variable only when its lr changes; a restored state (which holds that
    variable) must not leave the checkpoint's lr in force when the learner's own lr is what it last assigned."""
    from ba3c.experience import TrainBatch

    rng = np.random.default_rng(3)
    batch = TrainBatch(rng.normal(size=(8, 4)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32),
                       rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32))
    learner, _ = _learners({}, warmup=0)
    learner.train(batch)
    lr_index = len(learner.model.weights) + 1  # after the weights: Adam's step count, then its lr
    arrays = learner.state_arrays()
    assert arrays[lr_index] == np.float32(3e-2)
    arrays[lr_index] = np.float32(0.5)
    learner.load_state_arrays(arrays, "a state with another lr")
    learner.train(batch)
    assert learner.opt.learning_rate.numpy() == np.float32(3e-2)

