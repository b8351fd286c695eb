"""``python -m mm``: the same as the console script ``mm`` (mm/entry.py)."""

import sys

from .entry import main

sys.exit(main())
