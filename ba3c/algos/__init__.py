"""The training algorithms (--algo), each in a module of its own behind `ba3c.algos.base.Algorithm`, and the
one registry that maps an --algo value to one.

Built in: `ba3c` (Batch A3C, `ba3c.algos.a2c`) and `gorila` (distributed DQN, `ba3c.algos.dqn`). An
algorithm from outside the package is found either by its import path, `--algo package.module:ClassName`
(any importable module; the run's config.json keeps that string, so a resume and `ba3c.evaluate` find it
again), or by a name given to `register` in the same process (the library route).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ba3c.algos.base import Actor, ActorContext, Algorithm, MemoryCost
from ba3c.config import ConfigError

if TYPE_CHECKING:
    from ba3c.config import Config

__all__ = ["Actor", "ActorContext", "Algorithm", "MemoryCost", "algorithm", "builtin_names", "checked", "get",
           "register"]

# name -> "module:class", imported on first use (no algorithm's module is loaded before it is asked for)
_BUILTIN = {"ba3c": "ba3c.algos.a2c:BA3C", "gorila": "ba3c.algos.dqn:Gorila"}
_registered: dict[str, Algorithm] = {}


def builtin_names() -> tuple[str, ...]:
    return tuple(_BUILTIN)


def register(name: str, algorithm: type[Algorithm] | Algorithm) -> None:
    """Make `name` an --algo value in this process (library callers; a command line uses module:Class)."""
    if name in _BUILTIN:
        raise ValueError(f"'{name}' is a built-in algorithm; register another name")
    _registered[name] = algorithm() if isinstance(algorithm, type) else algorithm


def get(name: str) -> Algorithm:
    """The algorithm an --algo value names; ValueError saying what would be valid."""
    if name in _registered:
        return _registered[name]
    path = _BUILTIN.get(name, name)
    if ":" not in path:
        known = ", ".join([*_BUILTIN, *_registered])
        raise ValueError(f"unknown algorithm '{name}'; one of {known}, or a plug-in as module.path:ClassName")
    module, _, attr = path.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"algorithm '{name}' cannot be loaded ({e})") from None
    algorithm = obj() if isinstance(obj, type) else obj
    if not isinstance(algorithm, Algorithm):
        raise ValueError(f"algorithm '{name}' is not a ba3c.algos.Algorithm")
    _registered[name] = algorithm
    return algorithm


def algorithm(name: str) -> Algorithm:
    """The algorithm --algo names; ConfigError (one line for the command line) when there is none."""
    try:
        return get(name)
    except ValueError as e:
        raise ConfigError(f"--algo: {e}") from None


def checked(cfg: Config) -> Algorithm:
    """The config's algorithm, after its own checks of what it cannot combine with (ConfigError)."""
    algo = algorithm(cfg.learn.algo)
    algo.check(cfg)
    return algo
