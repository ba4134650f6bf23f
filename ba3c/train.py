"""`python -m ba3c.train`: validate everything cheap first, then start ranks, simulators and model."""
from __future__ import annotations

import json
import math
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NamedTuple

from ba3c.algos import algorithm, checked
from ba3c.config import (
    PRESETS,
    Config,
    ConfigError,
    build_parser,
    check_world,
    load_json,
    removed_behaviours,
    removed_message,
    resolve_life_loss,
    saved_config,
    sticky_actions_problem,
)
from ba3c.files import EXIT_NO_SPACE, NoSpaceError, unwritable

# Options that change the network or what it is trained on: a resume may not change them.
MODEL_DEFINING = ("env", "model", "algo")


def resolve(argv: Sequence[str] | None) -> tuple[Config, bool]:
    """Command line (and a resumed run's config.json) -> validated Config; raises ConfigError."""
    ns = vars(build_parser().parse_args(argv))
    cfg_file = ns.pop("config")
    values: dict = {}
    resume_dir = ns.get("resume", "")
    if resume_dir:
        saved = os.path.join(resume_dir, "config.json")
        if not os.path.isfile(saved):
            raise ConfigError(f"--resume: '{resume_dir}' is not a run directory (no config.json in it)")
        from ba3c.rundir import made_by

        try:
            with open(saved) as fh:
                data = json.load(fh)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--resume: cannot read '{saved}' ({e})") from None
        if used := removed_behaviours(data):
            raise ConfigError(removed_message(f"--resume: {saved}", used))
        old = saved_config(data, f"--resume: {saved}",
                           f"resume it with the ba3c that made it ({made_by(resume_dir)}), or start a new run "
                           f"(deleting them from config.json would resume under this version's behaviour, which "
                           f"is not what the run trained with)")
        values.update({k: v for g in old.to_dict().values() for k, v in g.items()})
        for k in MODEL_DEFINING:
            if k in ns and ns[k] != values[k]:
                raise ConfigError(f"--{k.replace('_', '-')} {ns[k]!r} differs from the resumed run's {values[k]!r}; "
                                  f"a resume must keep {', '.join(MODEL_DEFINING)} (start a new run instead)")
        values["run_dir"] = resume_dir
    if cfg_file:
        values.update(load_json(cfg_file))
    if "preset" in ns:
        values.update(PRESETS[ns["preset"]])
    values.update(ns)
    # The algorithm's defaults for shared options, under all of the above (a resumed run's config holds every option)
    defaults = algorithm(values.get("algo", "ba3c")).defaults
    return Config().replace(**{**defaults, **values}), bool(resume_dir)


def _check_writable(run_dir: str) -> None:
    if (why := unwritable(run_dir)) is not None:
        raise ConfigError(f"--run-dir: cannot write to '{run_dir}' ({why}); choose another")


def _check_fits(cfg: Config, spec) -> None:  # spec: simulators.EnvSpec
    """The network against the observations, and the sizes against this host's memory."""
    from ba3c import dist as dist_mod
    from ba3c.model import resolve_model_kind
    from ba3c.resources import available_memory, check_memory
    from ba3c.simulators import observation_info

    obs = observation_info(spec)
    if not obs.discrete_actions:
        raise ConfigError(f"--env {cfg.sim.env}: its action space is not discrete; ba3c's policies choose "
                          f"among discrete actions (try an Atari game or CartPole-v1)")
    model = resolve_model_kind(cfg.learn.model, obs.shape)
    obs_bytes = obs.itemsize * max(1, math.prod(obs.shape))
    extra = algorithm(cfg.learn.algo).memory(cfg, obs.shape, obs.itemsize)  # a replay memory, say
    check_memory(cfg, spec.kind, obs_bytes, model, dist_mod.ranks_on_this_host_hint(), available_memory(), extra)


def main(argv: Sequence[str] | None = None) -> int:
    from ba3c.signals import SignalFlag

    # First of all: every thread started after this leaves the stop signals to the flag's thread,
    # so a signal during the slow start-up (TF, emulators, MPI) ends the process at once.
    flag = SignalFlag()
    flag.install()
    try:
        return _main(argv, flag)
    finally:
        flag.restore()


class Checked(NamedTuple):
    """A command line that passed every check made before TensorFlow is imported."""

    cfg: Config
    resume: bool
    spec: Any  # simulators.EnvSpec
    run_dir: str
    backend: str


def check_args(argv: Sequence[str] | None) -> Checked:
    """Every check that needs no TensorFlow, in order; raises ConfigError (or simulators.UnknownEnvError) with
    the one line to print. Imports no TensorFlow and writes nothing."""
    from ba3c import dist as dist_mod
    from ba3c.rundir import default_run_dir
    from ba3c.simulators import resolve_env

    cfg, resume = resolve(argv)
    checked(cfg)  # what the algorithm cannot combine with
    spec = resolve_env(cfg.sim.env)
    cfg = resolve_life_loss(cfg, spec.kind == "atari")  # config.json records what the run does
    if cfg.sim.life_loss != "ignore" and spec.kind != "atari":
        raise ConfigError(f"--life-loss {cfg.sim.life_loss}: {cfg.sim.env} has no lives (only Atari games do); "
                          f"use --life-loss ignore")
    if cfg.sim.decorrelate_steps and spec.kind != "atari":
        raise ConfigError(f"--decorrelate-steps {cfg.sim.decorrelate_steps}: only Atari simulators restart single "
                          f"games; {cfg.sim.env} is not an Atari game (use 0)")
    sticky = (("--sticky-actions", cfg.sim.sticky_actions), ("--eval-sticky-actions", cfg.run.eval_sticky_actions))
    for option, p in sticky:
        if (problem := sticky_actions_problem(option, p, spec.kind, cfg.sim.env)) is not None:
            raise ConfigError(problem)
    check_world(cfg, dist_mod.world_size_hint())
    _check_fits(cfg, spec)
    run_dir = cfg.run.run_dir or default_run_dir(spec.name)
    _check_writable(run_dir)
    backend = dist_mod.choose_backend(cfg.run.dist)
    return Checked(cfg, resume, spec, run_dir, backend)


def _main(argv: Sequence[str] | None, flag) -> int:  # flag: signals.SignalFlag
    from ba3c import dist as dist_mod
    from ba3c.simulators import UnknownEnvError

    try:
        cfg, resume, spec, run_dir, backend = check_args(argv)
    except (ConfigError, UnknownEnvError) as e:
        print(f"ba3c: error: {e}", file=sys.stderr)
        return 2

    from ba3c.tfquiet import import_tensorflow_quietly

    import_tensorflow_quietly()
    from ba3c.runner import train
    from ba3c.workers import configure_tensorflow

    configure_tensorflow(cfg)
    d = dist_mod.init(backend)
    try:
        check_world(cfg, d.size)
        if d.is_root:
            print(f"ba3c: distribution backend '{d.name}' ({d.size} rank{'s' if d.size > 1 else ''})", flush=True)
        status = train(cfg, spec, d, run_dir, resume, flag)
    except NoSpaceError as e:  # the run directory had no room for the start (config.json, meta.json, progress.csv)
        again = f" with --resume {run_dir}" if resume else ""
        print(f"ba3c: error: {e.describe()}; {e.to_free()}, then start again{again}; exit status {EXIT_NO_SPACE}",
              file=sys.stderr, flush=True)
        if d.size == 1:
            return EXIT_NO_SPACE
        os._exit(EXIT_NO_SPACE)  # the other ranks may wait in a collective: end the job (as below)
    except BaseException:
        if d.size == 1:
            raise
        # Several ranks: the others may be inside a collective, so a collective shutdown here would
        # hang. Exit non-zero at once instead; mpirun then ends the job and names this rank.
        traceback.print_exc()
        print(f"ba3c: rank {d.rank} failed; ending the job (resume with --resume {run_dir})", file=sys.stderr,
              flush=True)
        os._exit(1)
    finally:
        flag.restore()
    d.shutdown()
    return status


if __name__ == "__main__":
    sys.exit(main())
