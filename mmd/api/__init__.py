"""The RPC methods, one module per namespace; :data:`METHODS` is the dispatch table.

docs/protocol.md documents each method; a test checks the two agree.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ..rpc import RPCError
from . import consent, daemon, mcp, session, tools


class Method(NamedTuple):
    params: type
    handler: Callable[..., Awaitable[Any]]


METHODS: dict[str, Method] = {
    name: Method(params, handler)
    for module in (daemon, session, consent, tools, mcp)
    for name, (params, handler) in module.METHODS.items()
}


def unknown_method(name: str) -> RPCError:
    close = difflib.get_close_matches(name, METHODS, n=1)
    hint = f' — did you mean "{close[0]}"?' if close else ""
    return RPCError(
        "unknown_method",
        f'no method "{name}"{hint} Methods: {", ".join(sorted(METHODS))} (see docs/protocol.md)',
    )
