"""`python -m studies.batch_scaling`: the same as `python -m studies.batch_scaling.batch_scaling`."""
import sys

from studies.batch_scaling.batch_scaling import main

sys.exit(main())
