"""Learning per frame against the global batch: frames to reach a score at global batch 64 ... 2048.

    python -m studies.batch_scaling --run 2048:sqrt --max-hours 2     # one point (resumes its run)
    python -m studies.batch_scaling --run next --max-hours 2          # the first unfinished point
    python -m studies.batch_scaling --analyze-only                     # table, JSON and plot only

Each point is a one-machine rehearsal of a many-rank run (`ba3c.train --rehearse-ranks K`): the
same data per update, learning rate and warm-up as K ranks would use, so frames to the target
depend on the global batch and the lr rule, not on this machine. A point runs through
`benchmarks.time_to_score` (criterion: mean training return of the last 20 episodes, the same as
the committed Pong result; beside it, a periodic evaluation of the policy at its frame, which the
training return lags by a game on every emulator) until the target or the frame cap, and resumes where it stopped when
run again: its newest checkpoint is kept in studies/batch_scaling/results/batch_scaling-state/ (about 20 MB
for the Nature CNN with Adam's state; git-ignored: copy that folder to another machine to continue
the point there, the run directory under runs/ is not needed). Writes
studies/batch_scaling/results/batch_scaling.{json,png} from every point's progress.csv and eval.csv (copied to
studies/batch_scaling/results/batch_scaling-GAME-POINT-{progress,eval}.csv, so curves survive the run directory),
with each point's state: reached, stopped at the cap, partial, or abandoned.

Rules (POINT is GLOBAL_BATCH:RULE): sqrt, linear, none (`--lr-scaling` at the default preset), paper
(`--preset paper`: fixed 1e-3 with the authors' Adam betas), kl (sqrt's lr to start, then `--lr-adapt
kl`: a trust region on each update's policy change that also moves the lr, up to 16x sqrt's), kl1
(the same with the lr never above sqrt's, `--kl-lr-max 1`), kl1ent (kl1 with the entropy bonus
0.01 x sqrt(64 / B): the policy gradient's noise falls as 1 / sqrt(B), the bonus's gradient does not),
advnorm (sqrt with `--advantage-norm batch`: advantages standardised within each rehearsed rank's batch).
The trainer options of kl, kl1, kl1ent and advnorm were removed after they measured no gain (RETIRED_RULES):
their kept curves are still analysed, but those points can no longer be run.

A point that will not reach the target (e.g. a collapsed run) is given up with
    python -m studies.batch_scaling --abandon 2048:sqrt --reason "collapsed at update 80"
which records it in studies/batch_scaling/results/batch_scaling-abandoned.json: `--run next` skips it and the
JSON reports it as abandoned, with the reason (the time-to-score projection counts it as not reached).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import scaling_results
from benchmarks.time_to_score import first_reach, main as time_to_score
from measure import harness
from measure.harness import Row

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")  # this study's committed results

# per rehearsed rank: the default preset's, the paper's
BASE_BATCH = {"sqrt": 64, "linear": 64, "none": 64, "paper": 32, "kl": 64, "kl1": 64, "kl1ent": 64, "advnorm": 64}
# rules whose trainer options were removed (--lr-adapt kl, --advantage-norm batch; git history: 7a76fc9bcf21)
RETIRED_RULES = ("kl", "kl1", "kl1ent", "advnorm")
DEFAULT_POINTS = ("64:sqrt,256:sqrt,1024:sqrt,2048:sqrt,2048:linear,2048:none,2048:paper,2048:kl,2048:kl1,2048:kl1ent,"
                  "2048:advnorm")
# The committed one-rank Pong run (default config: global batch 64, lr 5e-4 by the sqrt rule at its reference)
EARLIER_64 = os.path.join(harness.RESULTS, "time_to_score", "time_to_score-pong-progress.csv")


@dataclass(frozen=True)
class Point:
    global_batch: int
    rule: str  # sqrt | linear | none (ba3c's --lr-scaling at the default preset) | paper (--preset paper: fixed 1e-3)
    #            | kl (sqrt's lr to start, then --lr-adapt kl: each update's lr from the last one's policy change)

    @property
    def name(self) -> str:
        return f"gb{self.global_batch}-{self.rule}"

    @property
    def rehearse_ranks(self) -> int:
        return self.global_batch // BASE_BATCH[self.rule]

    def trainer_flags(self) -> list[str]:
        ranks = ["--rehearse-ranks", str(self.rehearse_ranks)]
        if self.rule == "paper":
            return ["--preset", "paper", *ranks]
        kl = ["--lr-scaling", "sqrt", "--lr-adapt", "kl", "--kl-lr-max"]
        # kl1ent: the entropy bonus x sqrt(64 / B), as the policy gradient's noise falls with the batch
        entropy = f"{0.01 * (BASE_BATCH[self.rule] / self.global_batch) ** 0.5:.3g}"
        extra = {"kl": [*kl, "16"],  # as first run: the lr may rise to 16x sqrt's
                 "kl1": [*kl, "1"],
                 "kl1ent": [*kl, "1", "--entropy-coef", entropy],
                 "advnorm": ["--lr-scaling", "sqrt", "--advantage-norm", "batch"]}.get(self.rule,
                                                                                        ["--lr-scaling", self.rule])
        return ["--train-batch", str(BASE_BATCH[self.rule]), *ranks, *extra]


@dataclass(frozen=True)
class PointResult:
    point: str
    global_batch: int
    rule: str
    state: str                  # reached | frame cap | partial (stopped by the time budget; resumable) | abandoned
    frames_to_target: int | None
    frames_total: int
    best_return_mean20: float | None
    wall_hours: float | None    # trainer wall time so far (all invocations)
    cpu_hours: float | None     # CPU time of the trainer process so far
    source: str
    note: str = ""              # why an abandoned point was given up
    # The policy at frame F, played by the periodic evaluation (paper protocol) where the point has
    # an eval.csv. The training return lags it: an episode counted at F began about
    # emulators x episode steps x frameskip frames earlier (3.3 M frames for a -21 Pong game at
    # 1,024 emulators), so many-emulator points look later by the training criterion than they learn.
    frames_to_target_eval: int | None = None
    best_eval: float | None = None
    emulators: int | None = None
    # The gradient noise scale measured along the run (--noise-scale-every), pooled per frame window
    noise_scale: list[dict[str, Any]] | None = None


NOISE_WINDOWS_M = (0, 1, 2, 4, 8, 16, 32, 64)  # frame windows (millions) the noise scale is pooled over


def undone(events: list[Row]) -> list[tuple[int, int]]:
    """The update ranges a collapse-guard rollback threw away: (snapshot update, rollback update]."""
    return [(int(e["snapshot_update"]), int(e["updates"])) for e in events
            if e.get("event") == "rollback" and e.get("snapshot_update")]


def noise_windows(rows: list[Row], events: list[Row] = (),
                  windows_m: Sequence[float] = NOISE_WINDOWS_M) -> list[dict[str, Any]]:
    """B_simple per frame window (edges in millions of frames, `windows_m`): each row's mean squared norms
    weighted by its measurements, pooled
    (means first, then the ratio: one measurement's |G|^2 is noisy), with the batch-size ratio of frames to a
    score that McCandlish et al.'s model predicts from it (modelled, not measured: E(B) ~ 1 + B / B_noise).
    Rows the collapse guard judged suspect or collapsed, and those of a stretch a rollback threw away, are
    left out: a collapsing policy's gradients (norms of 10-100 against ~0.1) would stand for the whole window."""
    from ba3c.api import noise_scale

    out, thrown = [], undone(list(events))
    for lo, hi in zip(windows_m, windows_m[1:]):
        rs = [r for r in rows if r.get("noise_n") and lo * 1e6 <= int(r["frames"]) < hi * 1e6
              and r.get("guard", "") in ("", "healthy") and not any(a < int(r["updates"]) <= b for a, b in thrown)]
        if not rs:
            continue
        n = [int(r["noise_n"]) for r in rs]
        pooled = lambda col, n=n, rs=rs: sum(k * float(r[col]) for k, r in zip(n, rs)) / sum(n)
        b_small, b_big = int(rs[-1]["noise_b_small"]), int(rs[-1]["noise_b_big"])
        g2, trace, b_simple = noise_scale(pooled("grad_sq_small"), pooled("grad_sq_big"), b_small, b_big)
        w: dict[str, Any] = {"frames_from": int(lo * 1e6), "frames_to": min(int(hi * 1e6), int(rs[-1]["frames"])),
                             "measurements": sum(n), "b_small": b_small, "b_big": b_big, "grad_sq_true": g2,
                             "trace_sigma": trace, "b_simple": b_simple}
        if all(r.get("pg_sq_small") for r in rs):  # the policy-gradient term alone (rows since it was logged)
            pg2, pg_trace, pg_simple = noise_scale(pooled("pg_sq_small"), pooled("pg_sq_big"), b_small, b_big)
            w.update(policy_grad_sq_true=pg2, policy_trace_sigma=pg_trace, b_simple_policy=pg_simple)
        for key, ratio in (("b_simple", "modelled_frames_ratio_2048_vs_64"),
                           ("b_simple_policy", "modelled_frames_ratio_2048_vs_64_policy")):
            b = w.get(key)
            if b is not None and b == b:  # not nan
                w[ratio] = (1 + 2048 / b) / (1 + 64 / b)
        out.append(w)
    return out


MODEL_BATCHES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # global batches the noise-scale model is written for
MODEL_TERMS = (("b_simple", "whole loss"), ("b_simple_policy", "policy term"))


def frames_reached(r: PointResult) -> tuple[int, str] | None:
    """A point's frames to the target: its evaluation's where it has one there (the policy at that frame),
    else its training return's (which lags by a game on every emulator). As the time-to-score projection
    counts them (benchmarks/scaling_results.py)."""
    return scaling_results.reached_at(vars(r))


def model_windows(windows: list[dict[str, Any]], key: str, frames_to: int) -> list[tuple[float, float]]:
    """(frames spent, noise scale) per window up to `frames_to`: a window runs from its start to the next
    window that has a value of `key` (a window without one, e.g. unresolved, counts with the one before it)."""
    ws = [w for w in windows if w.get(key) is not None and w[key] == w[key] and w[key] > 0
          and w["frames_from"] < frames_to]
    ends = [w["frames_from"] for w in ws[1:]] + [frames_to]
    return [(float(end - w["frames_from"]), float(w[key])) for w, end in zip(ws, ends)]


def noise_model(results: list[PointResult]) -> dict[str, Any] | None:
    """Frames to the target at other global batches, MODELLED from the noise scale measured along the
    largest-batch point that reached it (benchmarks/scaling_model.py: frames_from_noise_scale), for the
    whole loss and for the policy term alone; each checked against every other point that reached the
    target, and against every point that ran further than the model's frames without reaching it
    (`contradicted`). The projection uses the term whose checks erred least (the whole loss without checks)."""
    from benchmarks.scaling_model import frames_from_noise_scale

    sources = [r for r in results if frames_reached(r) and r.noise_scale]
    if not sources:
        return None
    src = max(sources, key=lambda r: r.global_batch)
    src_frames, src_how = frames_reached(src)
    out: dict[str, Any] = {
        "modelled": True, "source_point": src.point, "source_frames": src_frames, "source_criterion": src_how,
        "model": "McCandlish et al. 2018: frames(B) = sum over frame windows of frames_w x (1 + B / B_noise,w) / "
                 "(1 + b / B_noise,w), b the source point's global batch, B_noise,w its measured noise scale",
        "terms": {}}
    for key, term in MODEL_TERMS:
        windows = model_windows(src.noise_scale or [], key, src_frames)
        if not windows:
            continue
        frames = {b: frames_from_noise_scale(windows, src.global_batch, b) for b in MODEL_BATCHES}
        checks = []
        for r in results:
            reached = frames_reached(r)
            if r is src or not reached:
                continue
            modelled = frames_from_noise_scale(windows, src.global_batch, r.global_batch)
            checks.append({"point": r.point, "global_batch": r.global_batch, "measured": reached[0],
                           "criterion": reached[1], "modelled": modelled,
                           "modelled_over_measured": modelled / reached[0]})
        contradicted = {b: [r.point for r in results if r.global_batch == b and not frames_reached(r)
                            and r.frames_total >= f] for b, f in frames.items()}
        out["terms"][term] = {"frames": {str(b): f for b, f in frames.items()}, "checks": checks,
                              "contradicted": {str(b): ps for b, ps in contradicted.items() if ps}}
    if not out["terms"]:
        return None
    err = {t: max((abs(math.log(c["modelled_over_measured"])) for c in v["checks"]), default=None)
           for t, v in out["terms"].items()}
    checked = [t for t, e in err.items() if e is not None]
    out["projection_term"] = min(checked, key=lambda t: err[t]) if checked else next(iter(out["terms"]))
    return out


def model_lines(model: dict[str, Any] | None) -> list[str]:
    if not model:
        return ["noise-scale model: no point that reached the target has noise-scale measurements"]
    lines = [f"MODELLED frames to the target from the noise scale along {model['source_point']} "
             f"({model['source_frames'] / 1e6:.2f} M frames by its {model['source_criterion']}); "
             f"the projection uses the {model['projection_term']}:"]
    for term, v in model["terms"].items():
        frames = "  ".join(f"{b}: {f / 1e6:.1f} M" + (" (contradicted)" if b in v["contradicted"] else "")
                           for b, f in v["frames"].items())
        lines.append(f"  {term:<12} {frames}")
        for c in v["checks"]:
            lines.append(f"  {'':<12} check {c['point']}: measured {c['measured'] / 1e6:.2f} M ({c['criterion']}), "
                         f"modelled {c['modelled'] / 1e6:.2f} M, modelled / measured {c['modelled_over_measured']:.2f}")
        for b, ps in v["contradicted"].items():
            lines.append(f"  {'':<12} contradicted at {b}: {', '.join(ps)} ran further without reaching the target")
    return lines


def parse_point(text: str) -> Point:
    try:
        batch, rule = text.split(":")
        point = Point(int(batch), rule)
    except ValueError:
        raise SystemExit(f"batch_scaling: point '{text}' is not GLOBAL_BATCH:RULE (e.g. 2048:sqrt)") from None
    if rule not in BASE_BATCH or point.global_batch % BASE_BATCH[rule] or point.global_batch > 4096:
        raise SystemExit(f"batch_scaling: point '{text}': rule one of {', '.join(BASE_BATCH)}, global batch a "
                         f"multiple of {BASE_BATCH.get(rule, 64)} up to 4096")
    return point


def run_dir(args: argparse.Namespace, p: Point) -> str:
    return os.path.abspath(os.path.join(args.runs_dir, p.name))


# copied into the results, so curves (and the guard's actions) survive the run directory
KEPT_CSVS = ("progress.csv", "eval.csv", "events.csv")


def result_copy(args: argparse.Namespace, p: Point, csv_name: str) -> str:
    """Where a point's progress.csv or eval.csv is kept: batch_scaling-GAME-POINT-progress.csv etc."""
    return os.path.join(args.out, f"batch_scaling-{args.env.lower()}-{p.name}-{csv_name}")


def event_rows_of(args: argparse.Namespace, p: Point) -> list[Row]:
    """A point's collapse-guard events (events.csv): its run directory if present, else the committed copy."""
    return harness.read_first([os.path.join(run_dir(args, p), "events.csv"), result_copy(args, p, "events.csv")])[0]


def eval_rows_of(args: argparse.Namespace, p: Point) -> list[Row]:
    """A point's periodic evaluations (eval.csv): its run directory if present, else the committed copy."""
    return harness.read_first([os.path.join(run_dir(args, p), "eval.csv"), result_copy(args, p, "eval.csv")])[0]


def emulators_of(args: argparse.Namespace, p: Point) -> int | None:
    """Simulators across the rehearsed ranks, from the run's config.json (None where it is not at hand)."""
    for path in (os.path.join(run_dir(args, p), "config.json"), os.path.join(state_dir(args, p), "config.json")):
        if os.path.exists(path):
            with open(path) as fh:
                cfg = json.load(fh)
            return int(cfg["sim"]["num_envs"]) * int(cfg["run"].get("rehearse_ranks", 1))
    return None


def rows_of(args: argparse.Namespace, p: Point) -> tuple[list[Row], str]:
    """A point's progress rows: its run directory if present, else the committed copy."""
    paths = [os.path.join(run_dir(args, p), "progress.csv"), result_copy(args, p, "progress.csv")]
    if p == Point(64, "sqrt") and args.env == "pong":
        paths.append(EARLIER_64)
    return harness.read_first(paths)


def summarize(args: argparse.Namespace, p: Point) -> PointResult | None:
    rows, source = rows_of(args, p)
    if not rows:
        return None
    hit = first_reach(rows, args.target, "return_mean20")
    last = rows[-1]
    frames = int(last["frames"])
    note = abandoned(args).get(f"{args.env.lower()}-{p.name}", "")
    state = "reached" if hit else ("frame cap" if frames >= args.frame_cap else ("abandoned" if note else "partial"))
    best = max((float(r["return_mean20"]) for r in rows if r.get("return_mean20")), default=None)
    cpu = float(last["cpu_s"]) / 3600 if last.get("cpu_s") else None
    evals = eval_rows_of(args, p)
    eval_hit = first_reach(evals, args.target, "score_mean")
    best_eval = max((float(r["score_mean"]) for r in evals if r.get("score_mean")), default=None)
    return PointResult(p.name, p.global_batch, p.rule, state, int(hit["frames"]) if hit else None, frames, best,
                       float(last["time_s"]) / 3600, cpu, os.path.relpath(source, harness.ROOT), note,
                       int(eval_hit["frames"]) if eval_hit else None, best_eval, emulators_of(args, p),
                       noise_windows(rows, event_rows_of(args, p)) or None)


def abandoned_path(args: argparse.Namespace) -> str:
    return os.path.join(args.out, "batch_scaling-abandoned.json")


def abandoned(args: argparse.Namespace) -> dict[str, str]:
    """GAME-POINT -> why it was given up."""
    try:
        with open(abandoned_path(args)) as fh:
            return dict(json.load(fh))
    except FileNotFoundError:
        return {}


def abandon(args: argparse.Namespace, p: Point, reason: str) -> None:
    if not reason.strip():
        raise SystemExit("batch_scaling: --abandon needs --reason TEXT (what the curve showed)")
    marks = {**abandoned(args), f"{args.env.lower()}-{p.name}": reason.strip()}
    os.makedirs(args.out, exist_ok=True)
    tmp = abandoned_path(args) + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(marks, fh, indent=2, sort_keys=True)
    os.replace(tmp, abandoned_path(args))
    print(f"batch_scaling: {p.name} abandoned: {reason.strip()}")


def state_dir(args: argparse.Namespace, p: Point) -> str:
    return os.path.join(args.out, "batch_scaling-state", f"{args.env.lower()}-{p.name}")


def run_point(args: argparse.Namespace, p: Point) -> None:
    if p.rule in RETIRED_RULES:
        raise SystemExit(f"batch_scaling: {p.name}: the trainer options of rule {p.rule} were removed (they "
                         f"measured no gain); its kept curve is still analysed (--analyze-only), but it cannot be run")
    d = run_dir(args, p)
    if harness.restore_state(state_dir(args, p), d):  # a new machine: continue from the state kept with the results
        print(f"batch_scaling: {p.name}: continuing from {state_dir(args, p)}", flush=True)
    resume = os.path.exists(os.path.join(d, "config.json"))
    argv = ["--env", args.env, "--criterion", "train20", "--target", str(args.target), "--total-frames",
            str(args.frame_cap), "--max-hours", str(args.max_hours), "--run-dir", d, "--out-dir", args.out,
            "--tag", f"batch-{p.name}", "--nice", str(args.nice)]
    if resume:
        argv.append("--resume")
    evals = ["--eval-every-frames", str(args.eval_every_frames), "--eval-episodes", str(args.eval_episodes)]
    noise = ["--noise-scale-every", str(args.noise_scale_every)] if args.noise_scale_every else []
    time_to_score(argv + ["--", *p.trainer_flags(), *(evals if args.eval_every_frames else []), *noise])
    for name in KEPT_CSVS:
        if os.path.exists(os.path.join(d, name)):
            shutil.copy(os.path.join(d, name), result_copy(args, p, name))
    harness.save_state(d, state_dir(args, p))


def plot(results: list[PointResult], args: argparse.Namespace, points: list[Point], path: str) -> None:
    plt = harness.pyplot()
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(19, 5))
    for p in points:
        rows, _ = rows_of(args, p)
        xs = [int(r["frames"]) / 1e6 for r in rows if r.get("return_mean20")]
        ys = [float(r["return_mean20"]) for r in rows if r.get("return_mean20")]
        line = ax1.plot(xs, ys, label=f"global batch {p.global_batch}, {p.rule}: training mean-20")[0] if xs else None
        evals = [r for r in eval_rows_of(args, p) if r.get("score_mean")]
        if evals:
            ax1.plot([int(r["frames"]) / 1e6 for r in evals], [float(r["score_mean"]) for r in evals], ls="--",
                     marker=".", color=line.get_color() if line else None,
                     label=f"global batch {p.global_batch}, {p.rule}: evaluation (policy at that frame)")
    ax1.axhline(args.target, color="grey", ls=":")
    ax1.set(xlabel="frames (M)", ylabel="return", title=f"{args.env}: return against frames")
    ax1.legend(fontsize=8)
    for rule, marker in (("sqrt", "o"), ("linear", "s"), ("none", "D"), ("paper", "^"), ("kl", "v"), ("kl1", "<"),
                         ("kl1ent", ">"), ("advnorm", "P")):
        done = [r for r in results if r.rule == rule]
        reached = [r for r in done if r.frames_to_target]
        ax2.plot([r.global_batch for r in reached], [r.frames_to_target / 1e6 for r in reached], marker, ls="-",
                 label=f"{rule}: frames to {args.target:g}")
        open_ = [r for r in done if not r.frames_to_target]
        ax2.plot([r.global_batch for r in open_], [r.frames_total / 1e6 for r in open_], marker, mfc="none",
                 ls="none", label=f"{rule}: not yet reached (frames so far)")
    model = noise_model(results)
    for term, v in (model or {}).get("terms", {}).items():
        bs = [int(b) for b in v["frames"]]
        ax2.plot(bs, [f / 1e6 for f in v["frames"].values()], ":" if term != model["projection_term"] else "--",
                 color="grey", label=f"MODELLED from the noise scale along {model['source_point']}, {term}")
    ax2.set_xscale("log", base=2)
    ax2.set(xlabel="global batch", ylabel="frames (M)", title=f"frames to mean-20 return {args.target:g}")
    ax2.legend(fontsize=8)
    for r in results:
        for key, style, what in (("b_simple", "o-", "whole loss"), ("b_simple_policy", "s--", "policy term")):
            ws = [w for w in r.noise_scale or [] if w.get(key) is not None and w[key] == w[key]]
            if ws:
                ax3.plot([(w["frames_from"] + w["frames_to"]) / 2e6 for w in ws], [w[key] for w in ws], style,
                         label=f"global batch {r.global_batch}, {r.rule}: {what} "
                               f"(b {ws[0]['b_small']} vs {ws[0]['b_big']})")
    for b in sorted({r.global_batch for r in results}):
        ax3.axhline(b, color="grey", ls=":", lw=0.8)
    ax3.set_yscale("log")
    ax3.set(xlabel="frames (M), window midpoint", ylabel="B_simple = tr(Sigma) / |G|^2",
            title="gradient noise scale (grey: the global batches)")
    if ax3.has_data():
        ax3.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def analyze(args: argparse.Namespace, points: list[Point]) -> list[PointResult]:
    results = [r for r in (summarize(args, p) for p in points) if r is not None]
    out: dict[str, Any] = {"env": args.env, "target_return_mean20": args.target, "frame_cap": args.frame_cap,
                           "protocol": "one-machine rehearsal (--rehearse-ranks) of a run at each global batch; "
                                       "criterion: mean training return of the last 20 episodes (sampled policy); "
                                       "frames_to_target_eval: the first periodic evaluation (paper protocol) at the "
                                       "target, where the point has one",
                           "machine": harness.machine(), "points": [asdict(r) for r in results],
                           "noise_model": noise_model(results)}
    os.makedirs(args.out, exist_ok=True)
    name = "batch_scaling" if args.env == "pong" else f"batch_scaling-{args.env.lower()}"
    with open(os.path.join(args.out, f"{name}.json"), "w") as fh:
        json.dump(out, fh, indent=2)
    plot(results, args, points, os.path.join(args.out, f"{name}.png"))
    print(f"{'point':<16}{'state':<11}{'frames to target':>18}{'(by eval)':>12}{'frames so far':>15}"
          f"{'best mean-20':>14}{'best eval':>11}{'wall h':>8}")
    for r in results:
        ftt = f"{r.frames_to_target:,}" if r.frames_to_target else "-"
        fte = f"{r.frames_to_target_eval:,}" if r.frames_to_target_eval else "-"
        best = f"{r.best_return_mean20:.1f}" if r.best_return_mean20 is not None else "-"
        best_e = f"{r.best_eval:.1f}" if r.best_eval is not None else "-"
        print(f"{r.point:<16}{r.state:<11}{ftt:>18}{fte:>12}{r.frames_total:>15,}{best:>14}{best_e:>11}"
              f"{r.wall_hours or 0:>8.2f}" + (f"  ({r.note})" if r.note else ""))
    for r in results:
        for w in r.noise_scale or []:
            pg = w.get("b_simple_policy")
            print(f"noise scale {r.point}: frames {w['frames_from'] / 1e6:.0f}-{w['frames_to'] / 1e6:.1f} M, "
                  f"{w['measurements']} measurements: B_simple {w['b_simple']:.4g} (|G|^2 {w['grad_sq_true']:.3g}, "
                  f"tr Sigma {w['trace_sigma']:.3g})" + (f", policy term alone {pg:.4g}" if pg is not None else "")
                  + " [modelled frames at 2048 / at 64 = (1 + 2048/B) / (1 + 64/B)]")
    for line in model_lines(out["noise_model"]):
        print(line)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default=DEFAULT_POINTS, help="comma list of GLOBAL_BATCH:RULE")
    p.add_argument("--run", default="", help="a point to run or resume (GLOBAL_BATCH:RULE), or 'next': the first "
                                             "unfinished one; empty: analyze only")
    p.add_argument("--analyze-only", action="store_true")
    p.add_argument("--env", default="pong", help="the game (CartPole-v1 for a quick check of the tool)")
    p.add_argument("--target", type=float, default=18.0)
    p.add_argument("--frame-cap", type=int, default=40_000_000)
    p.add_argument("--max-hours", type=float, default=2.0, help="this invocation's budget for the point")
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--noise-scale-every", type=int, default=10,
                   help="the trainer's gradient noise scale measurement every this many updates (one more forward "
                        "and two more backward passes of the batch then, in sub-batches; progress.csv's noise_scale: "
                        "the batch beyond which more samples per update stop saving updates); 0: off")
    p.add_argument("--eval-every-frames", type=int, default=1_000_000,
                   help="periodic evaluation (paper protocol) of the policy at that frame, beside the training "
                        "criterion, which lags it by a game's frames on every emulator (0: off)")
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--abandon", default="", help="give up a point (GLOBAL_BATCH:RULE) that will not reach the target; "
                                                 "needs --reason")
    p.add_argument("--reason", default="", help="with --abandon: what the curve showed")
    p.add_argument("--runs-dir", default=os.path.join("runs", "batch_scaling"))
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args(argv)
    points = [parse_point(t) for t in args.points.split(",") if t]
    if args.abandon:
        abandon(args, parse_point(args.abandon), args.reason)
    elif args.run and not args.analyze_only:
        if args.run == "next":
            todo = [q for q in points if q.rule not in RETIRED_RULES  # and not abandoned:
                    and ((s := summarize(args, q)) is None or s.state == "partial")]
            if not todo:
                print("batch_scaling: every point is finished")
            else:
                run_point(args, todo[0])
        else:
            run_point(args, parse_point(args.run))
    analyze(args, points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
