"""The ``mmd`` command's first module: defers OpenSSL (mmd/deferred.py), then imports the daemon.

``defer_openssl`` must run before trio is imported, which is why it is not in mmd/main.py: there, the
imports sorted at the top of the file would import trio first.
"""

from .deferred import defer_openssl

defer_openssl()

from .main import main  # noqa: E402  (after defer_openssl, which must precede trio's `import ssl`)

__all__ = ["main"]
