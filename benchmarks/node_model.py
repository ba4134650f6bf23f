"""The one model of an update on N nodes: every projection that speaks of a node calls `update_time`.

    t_update(b, N, C) = fixed(C) + train(b, C) + collect(b, C) + exchange(N)

with b the per-node batch (`--train-batch`, one rank per node), N nodes of C cores, and
* fixed(C) = a_T x A(C) / A(T), A(x) = s + (1 - s) / x: the learner's fixed cost per update (clipping and Adam over
  1.7 M weights, framework calls; whatever the batch), the intercept of t = a + c b fitted to the train step timed at
  T threads on a many-core machine (the node file), carried from T to C threads by Amdahl's law with the serial
  fraction s fitted to the fixed cost at 1 and 2 threads timed on this machine (the threads file; assumed to hold
  beyond 2 threads);
* train(b, C) = c_T x T / C x b: the train step's compute per sample at T threads (the same fit), spread over C
  cores (assumed linear);
* collect(b, C) = k / C x b: the simulators' and predictor's work per sample on one core (the 1-rank 1-core trainer's
  time per agent step less its train step's, one scaling.json run), spread over C cores (assumed linear);
* exchange(N) = h + 2(N-1)/N x bytes / bandwidth + 2(N-1) x latency: Horovod's fixed cost per allreduce h (fitted on
  this machine, scaling.json) and the ring allreduce of the Nature CNN's 6.75 MB gradient (0 on one node); TCP
  networks at the fraction of line rate fitted over shaped links (studies/shaped_links), InfiniBand nominal.

benchmarks/scaling.py's frames/s projection (4 N b / t_update) and benchmarks/plan.py's minutes to a score (updates
x t_update) both take a `NodeModel` made by `load` from the same files, and write its inputs beside their numbers
(`node_model` in scaling.json and in its `time_to_score_envelope`), each input with its label and source.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import scaling_model as sm
from measure import harness

GRADIENT_BYTES = sm.BYTES_PER_FLOAT * sm.MODEL_FLOATS  # the Nature CNN's gradient, float32
FRAMES_PER_STEP = 4  # frameskip: one agent step (one sample) is 4 emulator frames
STEP_TIME_DIR = os.path.join(harness.RESULTS, "step_time")
# the 16-core measurement (in step_time.json's layout; benchmarks/device_scaling.sh makes its replacement)
NODE_FILE = os.path.join(STEP_TIME_DIR, "device16.json")
# the fixed cost at 1 and 2 threads, interleaved (python -m benchmarks.step_time --threads 1,2 ...)
THREADS_FILE = os.path.join(STEP_TIME_DIR, "fixed_cost-threads.json")
SCALING_FILE = os.path.join(harness.RESULTS, "scaling", "scaling.json")
SHAPED_LINKS_FILE = os.path.join(harness.ROOT, "studies", "shaped_links", "results", "shaped_links-horovod.json")
LABELS = ("measured", "fitted", "assumed")


@dataclass(frozen=True)
class Term:
    """One input of the model: its value, how it was obtained (measured | fitted | assumed) and from what."""
    value: float
    label: str
    source: str

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"Term label {self.label!r}: must be one of {LABELS}")


@dataclass(frozen=True)
class Network:
    """An interconnect: usable bandwidth and one-way latency per hop, each with where it comes from."""
    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    bandwidth_label: str  # measured | fitted | assumed
    latency_label: str
    source: str


# Over TCP, Horovod's defaults moved the ring's bytes at 0.43 of line rate in the shaped-link study (fitted to its
# link-bound points, 2-8 ranks; read from its JSON where present); latencies are published figures. InfiniBand was
# not measured: 0.8 of line rate and 2 us are nominal.
TCP_EFFICIENCY = 0.43
NOMINAL_EFFICIENCY = 0.8


def networks(tcp_efficiency: float = TCP_EFFICIENCY, tcp_label: str = "fitted") -> dict[str, Network]:
    tcp = (f"{tcp_efficiency:.2f} of line rate, fitted over shaped TCP links (Horovod defaults, studies/shaped_links)"
           if tcp_label == "fitted" else f"{tcp_efficiency:.2f} of line rate ({tcp_label})")
    return {
        "ib100": Network("100 Gb/s InfiniBand", NOMINAL_EFFICIENCY * 100e9 / 8, 2e-6, "assumed", "assumed",
                         f"nominal: {NOMINAL_EFFICIENCY} of line rate, 2 us (not measured)"),
        "25gbe": Network("25 GbE (TCP)", tcp_efficiency * 25e9 / 8, 20e-6, tcp_label, "assumed",
                         f"{tcp}; 10 GbE's published 20 us"),
        "10gbe": Network("10 GbE (TCP)", tcp_efficiency * 10e9 / 8, 20e-6, tcp_label, "assumed",
                         f"{tcp}; 20 us published (Hurwitz and Feng, Hot Interconnects 11, 2003)"),
        "10gbe-nominal": Network("10 GbE (nominal)", NOMINAL_EFFICIENCY * 10e9 / 8, 20e-6, "assumed", "assumed",
                                 f"nominal: {NOMINAL_EFFICIENCY} of line rate (not measured), 20 us published"),
        "1gbe": Network("1 GbE (TCP)", tcp_efficiency * 1e9 / 8, 35e-6, tcp_label, "assumed",
                        f"{tcp}; 35 us published (Open MPI over TCP, nw-grid.ac.uk LivMPI tests)"),
    }


def tcp_efficiency(shaped: dict[str, Any] | None) -> tuple[float, str]:
    """Horovod's default allreduce over shaped TCP links, as a share of line rate (fitted there), else the
    constant above (assumed)."""
    fit = (((shaped or {}).get("analysis") or {}).get("fits") or {}).get("horovod/default") or {}
    if fit.get("efficiency"):
        return float(fit["efficiency"]), "fitted"
    return TCP_EFFICIENCY, "assumed"


@dataclass(frozen=True)
class UpdateTime:
    """One synchronous update's seconds, by part (all modelled)."""
    fixed_s: float
    train_s: float
    collect_s: float
    exchange_s: float

    @property
    def total_s(self) -> float:
        return self.fixed_s + self.train_s + self.collect_s + self.exchange_s

    @property
    def floor_s(self) -> float:
        """What an update costs whatever its batch: the fixed cost and the exchange."""
        return self.fixed_s + self.exchange_s


@dataclass(frozen=True)
class NodeModel:
    """The inputs of `update_time`, each a labelled `Term`."""
    fixed_s: Term  # the learner's fixed cost per update at `threads` threads
    serial: Term  # Amdahl's serial fraction of the fixed cost (1: it does not fall with threads)
    train_s_per_sample: Term  # the train step's compute per sample at `threads` threads
    threads: int
    collect_s_per_sample_core: Term  # simulators + predictor, per sample on one core
    exchange_overhead_s: Term  # Horovod's fixed cost per allreduce
    fitted_batches: tuple[int, ...] = ()  # the batches the node file's fit was made to

    def fixed_at(self, cores: int) -> float:
        return self.fixed_s.value * amdahl(self.serial.value, cores) / amdahl(self.serial.value, self.threads)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def amdahl(serial: float, threads: int) -> float:
    """The share of its one-thread time work with serial fraction `serial` takes on `threads` threads."""
    return serial + (1.0 - serial) / threads


def update_time(node: NodeModel, net: Network, batch: int, nodes: int, cores: int) -> UpdateTime:
    """THE node model: seconds of one synchronous update at per-node batch `batch` on `nodes` nodes of `cores`
    cores each (one rank per node, all its cores), by part. Modelled."""
    exchange = sm.t_allreduce(nodes, GRADIENT_BYTES, sm.AllreduceFit(node.exchange_overhead_s.value,
                                                                    net.bandwidth_bytes_per_s, net.latency_s))
    return UpdateTime(node.fixed_at(cores), node.train_s_per_sample.value * node.threads / cores * batch,
                      node.collect_s_per_sample_core.value / cores * batch, exchange)


def frames_per_s(node: NodeModel, net: Network, batch: int, nodes: int, cores: int) -> float:
    """Frames/s of all nodes at per-node batch `batch` (modelled): 4 N b / t_update."""
    return FRAMES_PER_STEP * nodes * batch / update_time(node, net, batch, nodes, cores).total_s


@dataclass(frozen=True)
class ProjectionPoint:
    """Frames/s of N nodes at one per-node batch on one network (modelled): 4 N b / t_update, and the weak-scaling
    efficiency, frames/s over N x one node's at the same per-node batch. `exchange`: sync (exposed in full, the
    trainer's) or a measured exposed share's name (t = the rest + share x exchange)."""
    network: str  # the key in `networks()`, e.g. ib100
    network_name: str
    exchange: str
    nodes: int
    cores: int
    per_node_batch: int
    global_batch: int
    frames_per_s: float
    efficiency: float
    fixed_ms: float
    train_ms: float
    collect_ms: float
    exchange_ms: float
    modelled: bool = True


def project(node: NodeModel, nets: dict[str, Network], cores: int, batches: tuple[int, ...] = (32, 64),
            exposed: dict[str, float] | None = None) -> list[ProjectionPoint]:
    """The weak-scaling projection: every node count of sm.NODE_COUNTS whose global batch the trainer allows, on each
    network, at each per-node batch, through `update_time`."""
    out = []
    for key, net in nets.items():
        for b in batches:
            one = update_time(node, net, b, 1, cores).total_s
            for n in (n for n in sm.NODE_COUNTS if n * b <= sm.MAX_GLOBAL_BATCH):
                t = update_time(node, net, b, n, cores)
                for exchange, share in (("sync", 1.0), *(exposed or {}).items()):
                    total = t.total_s - (1.0 - share) * t.exchange_s
                    out.append(ProjectionPoint(key, net.name, exchange, n, cores, b, n * b,
                                               FRAMES_PER_STEP * n * b / total, one / total, 1e3 * t.fixed_s,
                                               1e3 * t.train_s, 1e3 * t.collect_s, 1e3 * share * t.exchange_s))
    return out


# ---------------------------------------------------------------- inputs from the result files

def load_json(path: str) -> dict[str, Any] | None:
    if not path or not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def _rel(path: str) -> str:
    return os.path.relpath(path, harness.ROOT) if os.path.isabs(path) else path


def describe(d: dict[str, Any], path: str) -> str:
    """A result file's provenance in one line: path, machine, date, command."""
    m = d.get("machine") or {}
    cmd = d.get("command") or "python -m benchmarks.step_time " + " ".join(
        f"--{k} {','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in (d.get("config") or {}).items()
        if k in ("threads", "batches", "rounds", "repeats"))
    return f"{_rel(path)}: {m.get('cores', '?')}-core {m.get('cpu', '?')}, {d.get('date', '?')}, `{cmd}`"


def step_fit(d: dict[str, Any], threads: int, estimate: str = "median_s") -> tuple[sm.StepFit, tuple[int, ...]]:
    """t = a + c b fitted to a step_time-layout file's per-batch `estimate` at `threads` threads (the tiny batch
    left out), and the batches it was fitted to. LookupError without two batches there."""
    s = ((d.get("summary") or {}).get(str(threads))) or {}
    pts = [(int(b), v[estimate]) for b, v in (s.get("batches") or {}).items()
           if int(b) != s.get("tiny_batch") and v.get(estimate)]
    fit = sm.fit_step_time(pts)
    if fit is None:
        raise LookupError(f"no two batches timed at {threads} thread(s): nothing to fit t = a + c b to")
    return fit, tuple(sorted(b for b, _ in pts))


def node_anchor(d: dict[str, Any], path: str) -> tuple[Term, Term, int, tuple[int, ...]]:
    """The fixed cost and compute per sample at the node file's largest thread count (fitted to its medians)."""
    threads = max(int(t) for t in d["summary"])
    fit, batches = step_fit(d, threads)
    src = (f"t = a + c b fitted to the medians at {threads} threads, batches {'/'.join(map(str, batches))}; "
           f"{describe(d, path)}")
    return Term(fit.overhead_s, "fitted", src), Term(fit.per_sample_s, "fitted", src), threads, batches


def serial_fraction(a1: float, a2: float) -> float:
    """Amdahl's serial fraction from one time at 1 thread and one at 2: a2 / a1 = s + (1 - s) / 2, clipped to
    [0, 1] (a fixed cost that grew with a second thread is taken as wholly serial)."""
    return min(max(2.0 * a2 / a1 - 1.0, 0.0), 1.0)


def fixed_cost_threads(d: dict[str, Any]) -> dict[str, Any]:
    """The fixed cost at 1 and 2 threads from the threads file, four ways (the batch-1 time and the intercept of
    t = a + c b, each from the medians over all rounds and from the fastest round), each with the serial fraction it
    gives; the model takes the batch-1 medians (the fixed cost measured directly, over every round). Also the compute
    per sample at 1 and 2 threads (the fits' slopes) and the intercepts' serial fraction per repeat."""
    out: dict[str, Any] = {}
    for name, key in (("medians", "median_s"), ("fastest rounds", "min_s")):
        (f1, _), (f2, _) = step_fit(d, 1, key), step_fit(d, 2, key)
        tiny = [((d["summary"][str(t)].get("batches") or {}).get(str(d["summary"][str(t)].get("tiny_batch"))) or {})
                .get(key) for t in (1, 2)]
        if all(tiny):
            out[f"batch 1, {name}"] = {"a1_s": tiny[0], "a2_s": tiny[1], "serial": serial_fraction(*tiny)}
        out[f"intercept, {name}"] = {"a1_s": f1.overhead_s, "a2_s": f2.overhead_s,
                                     "serial": serial_fraction(f1.overhead_s, f2.overhead_s),
                                     "c1_s": f1.per_sample_s, "c2_s": f2.per_sample_s}
    reps = {t: [r["median"]["overhead_s"] for r in d["summary"][str(t)].get("fit_by_repeat", []) if "median" in r]
            for t in (1, 2)}
    out["intercept by repeat, medians"] = [serial_fraction(a, b) for a, b in zip(reps[1], reps[2])]
    return out


SERIAL_ESTIMATE = "batch 1, medians"  # the one the model takes (fixed_cost_threads says why)


def serial_term(d: dict[str, Any] | None, path: str) -> Term:
    if not d:
        return Term(1.0, "assumed", f"no {_rel(path)}: the fixed cost held serial")
    est = fixed_cost_threads(d)
    if SERIAL_ESTIMATE not in est:
        raise LookupError(f"{path}: no batch-1 time at 1 and 2 threads (python -m benchmarks.step_time --tiny 1)")
    chosen = est[SERIAL_ESTIMATE]
    others = "; ".join(f"{k}: {1e3 * v['a1_s']:.2f} / {1e3 * v['a2_s']:.2f} ms, s = {v['serial']:.2f}"
                       for k, v in est.items() if isinstance(v, dict) and k != SERIAL_ESTIMATE)
    return Term(chosen["serial"], "fitted",
                f"Amdahl through the fixed cost at 1 and 2 threads, {SERIAL_ESTIMATE}: {1e3 * chosen['a1_s']:.2f} / "
                f"{1e3 * chosen['a2_s']:.2f} ms (other estimates, {others}); assumed to hold beyond 2 threads; "
                f"{describe(d, path)}")


def collect_term(scaling: dict[str, Any] | None) -> Term:
    """Simulators + predictor per sample on one core: the 1-rank 1-core trainer's seconds per agent step minus its
    train step's per sample (both in the same scaling.json run)."""
    try:
        base = next(m for m in scaling["measured"] if m["ranks"] == 1 and m["layout"] == "core"
                    and m.get("exchange", "sync") == "sync" and m.get("frames_per_s"))
        pipeline = FRAMES_PER_STEP / base["frames_per_s"]
        train = 1.0 / scaling["models"]["nature"]["train_samples_per_s_1thread"]
    except (TypeError, KeyError, StopIteration):
        return Term(0.0, "assumed", "no scaling.json with a 1-core trainer run: collection not charged")
    return Term(max(pipeline - train, 0.0), "fitted",
                f"1-rank 1-core trainer {1e3 * pipeline:.2f} ms per agent step minus its train step "
                f"{1e3 * train:.2f} ms per sample (scaling.json, {(scaling.get('machine') or {}).get('cpu', '?')}, "
                f"{scaling.get('date', '?')})")


def exchange_overhead_term(scaling: dict[str, Any] | None) -> Term:
    fit = (((scaling or {}).get("fit") or {}).get("allreduce") or {}).get("horovod")
    if not fit:
        return Term(0.0, "assumed", "no fitted Horovod overhead: 0")
    return Term(fit["overhead_s"], "fitted",
                f"Horovod's fixed cost per allreduce, fitted to the allreduce sweep (scaling.json, "
                f"{(scaling.get('machine') or {}).get('cpu', '?')}, {scaling.get('date', '?')})")


def load(scaling: dict[str, Any] | None, node_path: str = NODE_FILE, threads_path: str = THREADS_FILE) -> NodeModel:
    """The node model from its files; `scaling` is the scaling benchmark's JSON (dict) being analysed."""
    d = load_json(node_path)
    if d is None:
        raise LookupError(f"{node_path}: no such file (a step_time-layout JSON of the train step on a many-core "
                          "machine; benchmarks/device_scaling.sh makes one)")
    fixed, train, threads, batches = node_anchor(d, node_path)
    return NodeModel(fixed, serial_term(load_json(threads_path), threads_path), train, threads,
                     collect_term(scaling), exchange_overhead_term(scaling), batches)
