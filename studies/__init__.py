"""Studies: experiments that set a default or answered a design question (each folder's README says which).

Unlike `benchmarks/` (what a user runs to measure their own machine or cluster), a study records how
a decision was made. Each is runnable from the repository root as `python -m studies.NAME`, keeps
its results in `studies/NAME/results/`, and is described in `studies/NAME/README.md`.
"""
