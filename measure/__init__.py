"""The measuring library benchmarks/ and studies/ share: `measure.harness` (the machine, the trainer's CSVs, the
steady window, the trainer as a child process, a run's state kept beside its results).

Why a top-level package of its own, not `ba3c/measure.py`: it is repository tooling, not the trainer. It runs from
the repository root like benchmarks/ and studies/ (not installed: setup.cfg installs `ba3c*` only), it knows the
repository's layout (`ROOT`, `benchmarks/results/`), and it needs psutil, which the trainer does not. Below both
users, it lets a study depend on it without depending on a user-facing benchmark: the floors are ba3c, then
measure, then benchmarks, then studies.
"""
