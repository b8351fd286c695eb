"""The RPC methods, one module per namespace; :data:`METHODS` is the dispatch table.

Every handler is ``handler(daemon, connection, params) -> result``: params and
result are Structs of mmd.rpc (methods.py and results.py). The table is given
to the daemon (``Daemon(methods=METHODS)``); mmd.server never imports this
package. docs/protocol.md documents each method; a test checks the two agree.
"""

from __future__ import annotations

from ..rpc import Method
from . import consent, daemon, eval, mcp, models, session, tools, trust

METHODS: dict[str, Method] = {
    name: Method(params, handler)
    for module in (daemon, session, consent, trust, tools, mcp, eval, models)
    for name, (params, handler) in module.METHODS.items()
}

__all__ = ["METHODS", "Method"]
