"""Lost lives as terminals or not, on Breakout (set the default of --life-loss).

Run it with `python -m studies.life_loss_compare`; see README.md in this folder."""
