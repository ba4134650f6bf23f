"""Gorila's TD loss and bootstrap target on CartPole (set the defaults of --dqn-loss and --dqn-target).

Run it with `python -m studies.dqn_loss`; see README.md in this folder."""
