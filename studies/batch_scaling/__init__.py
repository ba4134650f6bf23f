"""Learning per frame against the global batch (one-machine rehearsals of many-rank runs).

Run it with `python -m studies.batch_scaling`; see README.md in this folder."""
