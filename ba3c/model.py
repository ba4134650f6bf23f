"""Networks: policy logits and state value from one trunk. No losses, no I/O."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

HEADS = ("actor_critic", "q")


def build_model(kind: str, obs_shape: tuple[int, ...], num_actions: int, seed: int,
                head: str = "actor_critic"):  # -> keras.Model
    """`nature` (Mnih et al. 2015 CNN), `paper` (Adamski et al. 2018), `mlp` (vector observations).

    head: `actor_critic` (BA3C: policy logits and state value) or `q` (Gorila: action values Q(s, .) and,
    as the second output, max_a Q(s, a), so that everything that reads (logits, value) — the predictor,
    argmax evaluation — works on a Q-network unchanged).

    Image inputs are uint8 (stack, 84, 84), scaled and moved to channels-last inside the model
    (TensorFlow's CPU convolutions want NHWC). Every rank calls this with the same seed, so all
    start from identical weights even before the broadcast.
    """
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input(shape=obs_shape, dtype="uint8" if len(obs_shape) == 3 else "float32", name="obs")
    ortho = lambda g: keras.initializers.Orthogonal(gain=g)  # noqa: E731
    if kind in ("nature", "paper"):
        if len(obs_shape) != 3:
            raise ValueError(f"--model {kind} needs image observations, got shape {obs_shape}; use --model mlp")
        x = layers.Lambda(lambda t: keras.ops.transpose(keras.ops.cast(t, "float32") / 255.0, (0, 2, 3, 1)))(inp)
        relu = dict(activation="relu", kernel_initializer=ortho(math.sqrt(2)))
        if kind == "nature":
            x = layers.Conv2D(32, 8, strides=4, **relu)(x)
            x = layers.Conv2D(64, 4, strides=2, **relu)(x)
            x = layers.Conv2D(64, 3, strides=1, **relu)(x)
            x = layers.Dense(512, **relu)(layers.Flatten()(x))
        else:  # the paper's network (authors' code): 5x5 convs with max-pooling, 128-unit linear layer
            for ch, k in ((32, 5), (32, 5), (64, 5)):
                x = layers.MaxPooling2D(2)(layers.Conv2D(ch, k, **relu)(x))  # valid padding: 84-80-40-36-18-14-7
            x = layers.Conv2D(64, 3, **relu)(x)  # -> 5x5x64
            x = layers.Dense(128, **relu)(layers.Flatten()(x))
    elif kind == "mlp":
        x = layers.Flatten()(inp)
        for _ in range(2):
            x = layers.Dense(64, activation="tanh", kernel_initializer=ortho(math.sqrt(2)))(x)
    else:
        raise ValueError(f"unknown model '{kind}'")
    if head == "q":
        q = layers.Dense(num_actions, kernel_initializer=ortho(1.0), name="q")(x)
        value = layers.Lambda(lambda t: keras.ops.max(t, axis=-1, keepdims=True), name="value")(q)
        return keras.Model(inp, [q, value], name=f"{kind}_q")
    if head != "actor_critic":
        raise ValueError(f"unknown head '{head}'; one of {', '.join(HEADS)}")
    logits = layers.Dense(num_actions, kernel_initializer=ortho(0.01), name="logits")(x)
    value = layers.Dense(1, kernel_initializer=ortho(1.0), name="value")(x)
    return keras.Model(inp, [logits, value], name=kind)


IMAGE_MODELS = ("nature", "paper")


def resolve_model_kind(kind: str, obs_shape: tuple[int, ...]) -> str:
    """`auto` -> the network for these observations; a network that cannot take them is a ConfigError."""
    from ba3c.config import ConfigError

    if kind == "auto":
        return "nature" if len(obs_shape) == 3 else "mlp"
    if kind in IMAGE_MODELS and len(obs_shape) != 3:
        raise ConfigError(f"--model {kind} needs image observations (frames, height, width), but this environment "
                          f"gives shape {obs_shape}; use --model mlp (or auto)")
    return kind


PROBE_OBS = 256  # observations the feature-health probe keeps (the first train batch's first ones)


@dataclass(frozen=True)
class FeatureHealth:
    """How much the representation the heads read still depends on the observation. A network whose ReLU
    units have died, or whose features no longer vary, plays one policy everywhere (README: dead units)."""
    units_active: float  # fraction of the heads' input units above 0 for at least one probe observation
    feature_std: float   # those units' std across the probe observations, mean over units
    logit_std: float     # the policy logits' std across the probe observations, mean over actions
    value_std: float     # the value's std across the probe observations


class HealthProbe:
    """Feature health of `model` on a fixed set of observations, measured whenever called (the current weights)."""

    def __init__(self, model, obs: np.ndarray) -> None:
        import keras

        if len(obs) < 2:
            raise ValueError(f"the feature-health probe needs at least 2 observations, got {len(obs)}")
        self.obs = np.array(obs)  # a copy: batches are reused buffers
        head = "q" if any(layer.name == "q" for layer in model.layers) else "logits"  # the layer the trunk feeds
        self._net = keras.Model(model.inputs, [model.get_layer(head).input, *model.outputs])

    def __call__(self) -> FeatureHealth:
        feat, logits, value = (np.asarray(t, np.float64) for t in self._net([self.obs], training=False))
        return FeatureHealth(float((feat > 0).any(axis=0).mean()), float(feat.std(axis=0).mean()),
                             float(logits.std(axis=0).mean()), float(value.std()))
