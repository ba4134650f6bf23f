"""The learner's Adam (TensorFlow's fused ResourceApplyAdam on the Keras optimizer's variables, ba3c.learner
Learner._adam) makes the same updates as keras.optimizers.Adam.apply_gradients, through warm-up, an lr cut and a
rollback, and keeps the checkpoint layout (network weights, then Keras Adam's variables)."""
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
    {},                                                                  # defaults: global clip 0.5, eps 1e-5
    dict(beta1=0.8, beta2=0.75, adam_eps=1e-8, clip_norm=0.1, clip_mode="avg"),  # the paper preset's
    dict(adam_eps=1e-8, clip_norm=0.0),                                  # Gorila's: no clipping
], ids=["defaults", "paper", "no-clip"])
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
    assert names[2:] == [f"{prefix}/{w.path.replace('/', '_')}_{slot}" for w in weights for slot in ("momentum", "velocity")]
    snapshot: list[np.ndarray] = []
    for step, b in enumerate(batches):
        if step == 4:
            snapshot = fused.state_arrays()
        if step == 8:  # a rollback as the collapse guard makes it: state back to update 4, lr cut, schedule back
            fused.load_state_arrays(snapshot, "the snapshot")
            fused.lr_step = int(fused.opt.iterations.numpy())
            fused.lr_scale = 0.5
            assert fused.lr_step == 4
        if step == 11:
            fused.lr_decay = ref.lr_decay = 0.7
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
