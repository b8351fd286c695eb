"""Keeping OpenSSL out of a daemon that has no use for it yet (run by mmd/boot.py before any import).

trio imports ``ssl`` when it is imported, and ``hashlib`` (imported by mm's own modules for a few short
digests) loads OpenSSL's libcrypto through ``_hashlib``. A daemon serving a model on this machine never
speaks TLS, but those two imports mapped and initialised OpenSSL in every daemon: about 4.5 MiB of its
resident memory, a seventh of it idle (35.0 → 30.3 MiB). So before anything else is imported:

- ``ssl`` is a stand-in module that imports the real one on first use of any of its names (an https
  provider, the MCP SDK), and from then on is the real module's names;
- ``hashlib`` and ``hmac`` are imported while ``_hashlib`` cannot be, so they use Python's own digests
  (SHA-256 of a few hundred bytes: nothing the daemon hashes is large; a downloaded model is hashed by
  ``mm local setup`` in a process of its own). ``_hashlib`` itself can be imported again right after: a
  module that imports it later (none of the daemon's) loads OpenSSL when it does.

``importlib.util.LazyLoader`` would be the standard way to defer ``ssl``, but on Python 3.11 an ``import
ssl`` statement reads the module's ``__spec__``, which makes LazyLoader import it at once.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types


class Deferred(types.ModuleType):
    """A module imported on the first use of one of its names (names already set are its own)."""

    _lock = threading.Lock()

    def __getattr__(self, name: str) -> object:
        real = self.load()
        return getattr(real, name)

    def load(self) -> types.ModuleType:
        """Import the real module (once, from any thread); later imports of the name get it directly."""
        with Deferred._lock:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            # Modules that imported the stand-in keep it: from now on it holds the real module's names.
            self.__dict__.update(real.__dict__)
        return real


def defer_openssl() -> None:
    """Make ``ssl`` a :class:`Deferred` and import ``hashlib``/``hmac`` without OpenSSL (see above)."""
    if "ssl" not in sys.modules:
        sys.modules["ssl"] = Deferred("ssl")
    if "_hashlib" not in sys.modules:
        sys.modules["_hashlib"] = None  # type: ignore[assignment]  # import fails: hashlib falls back
        try:
            import hashlib  # noqa: F401
            import hmac  # noqa: F401
        finally:
            del sys.modules["_hashlib"]
