import sys

from .boot import main

sys.exit(main())
