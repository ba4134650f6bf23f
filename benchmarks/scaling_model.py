"""The scaling model: pure arithmetic, no I/O, no processes (tests/benchmarks/test_scaling_model.py).

Ring allreduce of `bytes` over r ranks:
    t_allreduce(r) = a + 2(r-1)/r * bytes / bandwidth + 2(r-1) * latency      (0 for r = 1)
fitted by least squares to measured (r, bytes, seconds) points. An update on r ranks:
    sync exchange:    t = t_compute + t_allreduce(r),   efficiency = t_compute / t
    with rank waiting: t = E[max over the r ranks of a per-update time] + t_allreduce(r)   (expected_max_s:
                      every rank waits for the slowest; t_compute above is the mean, which no rank waits on)
Weak-scaling efficiency of a measured run: its frames/s over r x one rank's (over one rank's for
the `fat` layout, where every rank count shares the same cores).

A node (its cores, its fixed cost per update) and every projection to N nodes: benchmarks/node_model.py, the one
node model; minutes to a score per node count: benchmarks/plan.py.
Frames to a score at batch B from the noise scale B_noise (McCandlish et al. 2018, "An empirical model of
large-batch training": E(B) = E_min (1 + B / B_noise)), applied to each frame window of a run measured at b:
    frames(B) = sum over windows of frames_w x (1 + B / B_noise,w) / (1 + b / B_noise,w).
A link of line rate R carries TCP payload at R x (mtu - 52) / (mtu + framing) with full-size
segments (studies/shaped_links measures allreduce over such links).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MODEL_FLOATS = 1_687_719  # Nature CNN parameters with Pong's 6 actions (the gradient message)
BYTES_PER_FLOAT = 4
MAX_GLOBAL_BATCH = 4096  # the trainer's limit
NODE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class Link:
    """A network, by nominal figures (editable): bandwidth and latency per message hop."""
    bandwidth_bytes_per_s: float
    latency_s: float


NETWORKS = {
    "10GbE": Link(1.25e9 * 0.8, 30e-6),
    "100Gb/s InfiniBand": Link(12.5e9 * 0.8, 2e-6),
}


@dataclass(frozen=True)
class AllreduceFit:
    overhead_s: float
    bandwidth_bytes_per_s: float
    latency_s: float
    points: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"overhead_s": self.overhead_s, "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
                "latency_s": self.latency_s, "points": self.points}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> AllreduceFit | None:
        if not d:
            return None
        return cls(d["overhead_s"], d["bandwidth_bytes_per_s"], d["latency_s"], d.get("points", 0))


@dataclass(frozen=True)
class AllreduceSample:
    """One measured allreduce: `ranks` ranks, `nbytes` bytes, median `seconds`."""
    ranks: int
    nbytes: float
    seconds: float


def fit_allreduce(samples: Iterable[AllreduceSample]) -> AllreduceFit | None:
    """Least squares for t = a + 2(r-1)/r * bytes / bandwidth + 2(r-1) * latency over samples with r >= 2.

    Fewer than 3 samples: None. One rank count only: latency cannot be told apart from the fixed
    overhead, so it is taken as 0. Negative coefficients are clipped to 0 (infinite bandwidth).
    """
    rows = [(1.0, 2 * (s.ranks - 1) / s.ranks * s.nbytes, 2.0 * (s.ranks - 1), s.seconds)
            for s in samples if s.ranks >= 2]
    if len(rows) < 3:
        return None
    a = np.array([r[:3] for r in rows])
    if len({r[2] for r in rows}) < 2:
        a[:, 2] = 0.0
    coef, *_ = np.linalg.lstsq(a, np.array([r[3] for r in rows]), rcond=None)
    overhead, inv_bw, latency = (max(float(c), 0.0) for c in coef)
    return AllreduceFit(overhead, 1.0 / inv_bw if inv_bw > 0 else float("inf"), latency, len(rows))


def t_allreduce(ranks: int, nbytes: float, fit: AllreduceFit) -> float:
    if ranks <= 1:
        return 0.0  # the trainer skips the exchange with one rank
    return (fit.overhead_s + 2 * (ranks - 1) / ranks * nbytes / fit.bandwidth_bytes_per_s
            + 2 * (ranks - 1) * fit.latency_s)


def ring_bytes_per_rank(ranks: int, nbytes: float) -> float:
    """Bytes each rank sends (and receives) in a ring allreduce of `nbytes`: 2(r-1)/r x nbytes."""
    return 2 * (ranks - 1) / ranks * nbytes if ranks > 1 else 0.0


TCP_IP_HEADER_BYTES = 52  # IPv4 20 + TCP 20 + the timestamps option 12, in every segment
QDISC_FRAMING_BYTES = 14  # the Ethernet header: what a Linux qdisc (tc tbf) counts besides the IP packet
WIRE_FRAMING_BYTES = 38  # on a real Ethernet: header 14 + FCS 4 + preamble 8 + inter-frame gap 12


def tcp_payload_bandwidth(line_bytes_per_s: float, mtu: int = 1500, framing_bytes: int = QDISC_FRAMING_BYTES) -> float:
    """TCP payload bytes/s over a link of `line_bytes_per_s` with full-MTU segments."""
    return line_bytes_per_s * (mtu - TCP_IP_HEADER_BYTES) / (mtu + framing_bytes)


def fit_link_efficiency(samples: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares t = a + x / efficiency over (x, t) pairs, x the seconds at full line rate.

    Returns (a, efficiency); None with fewer than 2 distinct x. A negative a is refitted as 0.
    """
    if len({x for x, _ in samples}) < 2:
        return None
    x, t = np.array([s[0] for s in samples]), np.array([s[1] for s in samples])
    (a, k), *_ = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), t, rcond=None)
    if a < 0:
        a, k = 0.0, float(x @ t / (x @ x))
    return float(a), 1.0 / float(k)


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured: positive when the model is slower than what was measured."""
    return (predicted - measured) / measured


def expected_max_s(per_rank: Sequence[Sequence[float]], draws: int = 20_000, seed: int = 0) -> float:
    """E[max over the ranks of one per-update time from each]: the compute term of a synchronous update.

    Every rank waits in the exchange for the slowest, so an update on r ranks takes the largest of r per-update
    times, not their mean. `per_rank[i]`: rank i's per-update seconds measured without an exchange. Estimated by
    resampling: `draws` times, one time drawn (with replacement) from each rank's list, the largest kept; their
    mean. The draws are independent, so updates are assumed to run late independently of each other and of the
    other ranks (a rank slowed for many updates in a row is covered by its own list being slower). One rank:
    its mean."""
    if not per_rank or any(len(t) == 0 for t in per_rank):
        raise ValueError("expected_max_s: every rank needs at least one per-update time")
    if len(per_rank) == 1:
        return float(np.mean(per_rank[0]))
    rng = np.random.default_rng(seed)
    picks = np.stack([rng.choice(np.asarray(t, dtype=np.float64), size=draws) for t in per_rank])
    return float(picks.max(axis=0).mean())


def sync_update_s(per_rank: Sequence[Sequence[float]], t_allreduce_s: float) -> float:
    """Modelled seconds per synchronous update with rank waiting: E[max of the ranks' per-update times] + the
    exchange (the exchange starts once the slowest rank has its gradient)."""
    return expected_max_s(per_rank) + t_allreduce_s


def predict_efficiency(ranks: int, t_compute: float, fit: AllreduceFit, floats: int = MODEL_FLOATS) -> float:
    """Modelled, sync exchange: no overlap of the exchange with compute (an upper bound on its cost)."""
    return t_compute / (t_compute + t_allreduce(ranks, BYTES_PER_FLOAT * floats, fit))


def weak_scaling_efficiency(frames_per_s: float, ranks: int, base_frames_per_s: float, shared_cores: bool) -> float:
    """frames/s over r x one rank's; over one rank's alone when all rank counts share the same cores."""
    return frames_per_s / ((1 if shared_cores else ranks) * base_frames_per_s)


@dataclass(frozen=True)
class FramesToScore:
    """Frames a run at `global_batch` needed to reach the score (None: not reached): measured, or
    `modelled` (from the noise scale; used only where no measurement answers)."""
    global_batch: int
    frames: float | None
    source: str = ""
    modelled: bool = False


def frames_from_noise_scale(windows: Sequence[tuple[float, float]], measured_batch: int, batch: int) -> float:
    """Frames to the score at `batch` (modelled) from a run at `measured_batch` that spent windows[i][0]
    frames where the noise scale was windows[i][1] (McCandlish et al.: each window's frames scale by
    (1 + B / B_noise) / (1 + b / B_noise)). Not measured: the model assumes each window's progress needs
    a fixed number of well-tuned steps at small batch and of samples at large batch."""
    if measured_batch < 1 or batch < 1:
        raise ValueError(f"batches must be positive (got {measured_batch}, {batch})")
    total = 0.0
    for frames, b_noise in windows:
        if frames < 0 or not b_noise > 0:
            raise ValueError(f"window ({frames}, {b_noise}): frames must be >= 0 and the noise scale > 0")
        total += frames * (1 + batch / b_noise) / (1 + measured_batch / b_noise)
    return total


@dataclass(frozen=True)
class StepFit:
    """A learner update's time against its per-rank batch b: t(b) = overhead + per_sample x b (fitted).

    `overhead_s` is what an update costs whatever its batch (framework dispatch, host round-trips,
    Python); `per_sample_s` the compute each sample adds. `max_abs_error`: the largest
    |fit - measured| / measured over the points it was fitted to."""
    overhead_s: float
    per_sample_s: float
    points: int = 0
    max_abs_error: float = 0.0

    def seconds(self, batch: float) -> float:
        return self.overhead_s + self.per_sample_s * batch

    def to_json(self) -> dict[str, Any]:
        return {"overhead_s": self.overhead_s, "per_sample_s": self.per_sample_s, "points": self.points,
                "max_abs_error": self.max_abs_error, "samples_per_s_asymptotic": 1.0 / self.per_sample_s}


def fit_step_time(points: Iterable[tuple[float, float]]) -> StepFit | None:
    """Least squares on relative error, sum ((a + c b - t) / t)^2, over (batch, seconds) points.

    Relative, not absolute: a 10 ms update measured at batch 4 counts as much as a 300 ms one at
    256, so the fitted overhead is not swamped by the large batches' noise. Fewer than 2 distinct
    batches, or a non-positive slope: None. A negative intercept is refitted as 0."""
    pts = [(float(b), float(t)) for b, t in points if t > 0]
    if len({b for b, _ in pts}) < 2:
        return None
    b, t = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    rows = np.stack([1.0 / t, b / t], axis=1)
    (a, c), *_ = np.linalg.lstsq(rows, np.ones_like(t), rcond=None)
    if a < 0:
        x = b / t
        a, c = 0.0, float(x.sum() / (x @ x))
    if c <= 0:
        return None
    err = np.abs((a + c * b - t) / t)
    return StepFit(float(a), float(c), len(pts), float(err.max()))
