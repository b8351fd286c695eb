"""msgpack-RPC for mm: framing (no I/O), messages, method params.

Imports nothing else of mmd, so thin clients can use it without pulling in
trio or the daemon.
"""

from .framing import DEFAULT_MAX_DEPTH, DEFAULT_MAX_FRAME, FrameError, Splitter
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
    notification,
    request,
    response,
)

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FRAME",
    "PROTOCOL_VERSION",
    "FrameError",
    "Notification",
    "ProtocolError",
    "RPCError",
    "Request",
    "Response",
    "Splitter",
    "decode_message",
    "decode_notification_arg",
    "decode_params",
    "notification",
    "request",
    "response",
]
