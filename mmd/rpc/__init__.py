"""msgpack-RPC for mm: framing and connection state (no I/O), messages, method params and results.

Imports nothing else of mmd, so thin clients can use it without pulling in
trio or the daemon.
"""

from . import results
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
    decode_result,
    notification,
    request,
    response,
)
from .protocol import Action, Call, Fatal, Ignored, Method, Refused, ServerProtocol, unknown_method

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FRAME",
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
