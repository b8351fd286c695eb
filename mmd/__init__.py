"""mm's daemon and the modules its clients share (the protocol layer, mmd.rpc)."""

import sys

__version__ = "0.1.0"

# httpx imports its command-line client when click, rich and pygments happen to be installed
# (pygments comes with prompt_toolkit): 20–30 ms of every daemon start for code mm never runs.
# A None entry makes that import fail, and httpx then defines a stub instead. It is set here,
# in the package every module of mm imports first, so that it precedes every `import httpx`.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
