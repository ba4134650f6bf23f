"""`python -m studies.shaped_links`: the same as `python -m studies.shaped_links.shaped_links`."""
import sys

from studies.shaped_links.shaped_links import main

sys.exit(main())
