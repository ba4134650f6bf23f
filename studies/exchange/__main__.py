"""`python -m studies.exchange`: the same as `python -m studies.exchange.exchange`."""
import sys

from studies.exchange.exchange import main

sys.exit(main())
