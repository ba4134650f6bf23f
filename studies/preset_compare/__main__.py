"""`python -m studies.preset_compare`: the same as `python -m studies.preset_compare.preset_compare`."""
import sys

from studies.preset_compare.preset_compare import main

sys.exit(main())
