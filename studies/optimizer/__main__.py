"""`python -m studies.optimizer`: the same as `python -m studies.optimizer.optimizer`."""
import sys

from studies.optimizer.optimizer import main

sys.exit(main())
