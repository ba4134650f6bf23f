"""`python -m ba3c.train`: validate everything cheap first, then start ranks, simulators and model."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from typing import Sequence

from ba3c.config import PRESETS, Config, ConfigError, build_parser, check_world, config_from_dict, load_json

# Options that change the network or what it is trained on: a resume may not change them.
MODEL_DEFINING = ("env", "model")


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
        with open(saved) as fh:
            old = config_from_dict(json.load(fh))
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
    return Config().replace(**values), bool(resume_dir)


def _check_writable(run_dir: str) -> None:
    parent = run_dir
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    try:  # os.access says yes to root even on read-only file systems: really try
        with tempfile.TemporaryFile(dir=parent or "."):
            pass
    except OSError as e:
        raise ConfigError(f"--run-dir: cannot write to '{run_dir}' ({parent or '.'}: {e.strerror}); choose another") from None


def main(argv: Sequence[str] | None = None) -> int:
    from ba3c import dist as dist_mod
    from ba3c.rundir import default_run_dir
    from ba3c.simulators import UnknownEnvError, resolve_env

    try:
        cfg, resume = resolve(argv)
        spec = resolve_env(cfg.sim.env)
        check_world(cfg, dist_mod.world_size_hint())
        run_dir = cfg.run.run_dir or default_run_dir(spec.name)
        _check_writable(run_dir)
        backend = dist_mod.choose_backend(cfg.run.dist)
    except (ConfigError, UnknownEnvError) as e:
        print(f"ba3c: error: {e}", file=sys.stderr)
        return 2

    from ba3c.runner import train
    from ba3c.workers import SignalFlag, configure_tensorflow

    flag = SignalFlag()  # before the slow start-up (TF, MPI, model): a warning signal then is not fatal
    flag.install()
    configure_tensorflow(cfg)
    d = dist_mod.init(backend)
    try:
        check_world(cfg, d.size)
        if d.is_root:
            print(f"ba3c: distribution backend '{d.name}' ({d.size} rank{'s' if d.size > 1 else ''})", flush=True)
        status = train(cfg, spec, d, run_dir, resume, flag)
    except BaseException:
        if d.size == 1:
            raise
        # Several ranks: the others may be inside a collective, so a collective shutdown here would
        # hang. Exit non-zero at once instead; mpirun then ends the job and names this rank.
        traceback.print_exc()
        print(f"ba3c: rank {d.rank} failed; ending the job (resume with --resume {run_dir})", file=sys.stderr, flush=True)
        os._exit(1)
    finally:
        flag.restore()
    d.shutdown()
    return status


if __name__ == "__main__":
    sys.exit(main())
