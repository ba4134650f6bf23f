"""`python -m studies.dqn_loss`: the same as `python -m studies.dqn_loss.dqn_loss`."""
import sys

from studies.dqn_loss.dqn_loss import main

sys.exit(main())
