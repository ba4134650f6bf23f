"""ba3c's benchmarks, what a user runs: `python -m benchmarks.NAME` from the repository root (not installed).

throughput, scaling (with allreduce_probe, scaling_model, scaling_results), step_time and plan, time_to_score,
paper_games, compare (the scores tables). What they share with studies/ (machine, progress.csv, steady window,
trainer process) is measure.harness; `netns` builds a cluster of network namespaces in one box. Results go to
benchmarks/results/<benchmark>/; docs/results/ describes them. Experiments that set a default are in studies/.
"""
