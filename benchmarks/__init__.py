"""ba3c's benchmarks: run each as `python -m benchmarks.NAME` from the repository root.

`harness` is what they share (machine, progress.csv, steady window, trainer process);
`scaling_model` is the scaling benchmark's pure arithmetic.
"""
