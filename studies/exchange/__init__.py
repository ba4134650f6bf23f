"""How the gradient exchange's variants, knobs and overlap cost an update on 2 ranks.

Run it with `python -m studies.exchange`; see README.md in this folder."""
