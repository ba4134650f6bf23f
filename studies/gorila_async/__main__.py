"""`python -m studies.gorila_async`: the same as `python -m studies.gorila_async.gorila_async`."""
import sys

from studies.gorila_async.gorila_async import main

sys.exit(main())
