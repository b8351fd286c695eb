"""msgpack-RPC for mm: framing and connection state (no I/O), messages, method params and results.

Imports nothing else of mmd, so thin clients can use it without pulling in
trio or the daemon.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import results
    from .framing import DEFAULT_MAX_DEPTH, DEFAULT_MAX_FRAME, MAX_REQUEST_VALUES, FrameError, Splitter
    from .messages import (
        PROTOCOL_VERSION,
        Notification,
        ProtocolError,
        Request,
        Response,
        RPCError,
        decode_message,
        decode_notification_arg,
        decode_params,
        decode_result,
        notification,
        request,
        response,
    )
    from .protocol import Action, Call, Fatal, Ignored, Method, Refused, ServerProtocol, unknown_method

# Where each name of the package lives. The submodules are imported on first use, so that
# ``mmd.rpc.trust`` (the standard library alone) costs a client nothing more: a cold ``mm -p``
# starts the daemon after importing only it (clients/mm/spawn.py), before msgspec.
_HOMES = {
    "results": None,
    **dict.fromkeys(
        ("DEFAULT_MAX_DEPTH", "DEFAULT_MAX_FRAME", "MAX_REQUEST_VALUES", "FrameError", "Splitter"), "framing"
    ),
    **dict.fromkeys(
        (
            "PROTOCOL_VERSION",
            "Notification",
            "ProtocolError",
            "Request",
            "Response",
            "RPCError",
            "decode_message",
            "decode_notification_arg",
            "decode_params",
            "decode_result",
            "notification",
            "request",
            "response",
        ),
        "messages",
    ),
    **dict.fromkeys(
        ("Action", "Call", "Fatal", "Ignored", "Method", "Refused", "ServerProtocol", "unknown_method"),
        "protocol",
    ),
}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _HOMES[name]
    module = importlib.import_module(f"{__name__}.{home or name}")
    value = module if home is None else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FRAME",
    "MAX_REQUEST_VALUES",
    "PROTOCOL_VERSION",
    "Action",
    "Call",
    "Fatal",
    "FrameError",
    "Ignored",
    "Method",
    "Notification",
    "ProtocolError",
    "RPCError",
    "Refused",
    "Request",
    "Response",
    "ServerProtocol",
    "Splitter",
    "decode_message",
    "decode_notification_arg",
    "decode_params",
    "decode_result",
    "notification",
    "request",
    "response",
    "results",
    "unknown_method",
]
