"""The default preset against the paper's, per core-hour, on Pong.

Run it with `python -m studies.preset_compare`; see README.md in this folder."""
