"""`python -m studies.life_loss_compare`: the same as `python -m studies.life_loss_compare.life_loss_compare`."""
import sys

from studies.life_loss_compare.life_loss_compare import main

sys.exit(main())
