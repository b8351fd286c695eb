"""The TLS settings of mm's HTTP clients, built once per process and only where TLS is used.

Loading the CA bundle costs 30–40 ms of CPU each time (190 ms the first time in a process,
with certifi's import) and a megabyte of C heap; httpx pays it for every ``AsyncClient`` unless
given a context. Most of mm's connections are plain HTTP to a server on this machine (a local
model, a scripted one), so that cost fell on every turn and on the daemon's first request.

- :func:`context_for` ``(url)``: for an ``https:`` URL the verified context (httpx's defaults:
  certifi, or ``$SSL_CERT_FILE``), built on first use; for any other URL a context that trusts
  no certificate, so that a redirect to TLS, were one ever followed, fails instead of going
  unverified.
"""

from __future__ import annotations

import functools
import ssl


def context_for(url: str) -> ssl.SSLContext:
    """The TLS context for an HTTP client whose requests go to *url*."""
    return _verified() if url.lower().startswith("https:") else _trusting_nothing()


@functools.cache
def _verified() -> ssl.SSLContext:
    import httpx  # only for connections beyond this machine (mmd/models/transport.py)

    return httpx.create_ssl_context()


@functools.cache
def _trusting_nothing() -> ssl.SSLContext:
    # Certificates required, none trusted: no TLS handshake can succeed with it.
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
