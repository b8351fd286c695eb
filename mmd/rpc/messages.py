"""The wire types of mm's msgpack-RPC, as msgspec Structs.

msgpack-RPC messages are arrays whose first element says what they are:
``[0, msgid, method, params]``, ``[1, msgid, error, result]`` and
``[2, method, params]``. Tagged ``array_like`` Structs map onto them one to
one. ``params`` stay ``msgspec.Raw`` until the method is known, then decode
into that method's own Struct (see :func:`decode_params`).

By convention every mm method takes one map argument (``params`` is
``[{...}]``) or none (``[]``); from Neovim that is
``vim.rpcrequest(chan, "session.prompt", {prompt = "hi"})``.

This module imports nothing else of mmd: the client uses it too.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

# Bumped on any incompatible change to methods, params or events.
PROTOCOL_VERSION = 1

T = TypeVar("T")


class Request(msgspec.Struct, array_like=True, tag=0):
    msgid: int
    method: str
    params: msgspec.Raw


class Response(msgspec.Struct, array_like=True, tag=1):
    msgid: int
    error: Any
    result: Any


class Notification(msgspec.Struct, array_like=True, tag=2):
    method: str
    params: msgspec.Raw


Message = Request | Response | Notification


class PeerResponse(msgspec.Struct, array_like=True, tag=1):
    """A response as the daemon reads one: it sends no requests, so what a client's response carries is
    skipped unread (an untyped ``result`` of 16 MiB of ``{}`` was 1.2 GB)."""

    msgid: int
    error: msgspec.Raw
    result: msgspec.Raw


class _Head(msgspec.Struct, array_like=True):
    """The first two elements of a frame that is no message, to answer it if it looked like a request; the
    rest is skipped unread."""

    kind: int
    msgid: int


class ProtocolError(Exception):
    """A frame that is msgpack but not a valid msgpack-RPC message."""

    def __init__(self, message: str, msgid: int | None = None) -> None:
        super().__init__(message)
        self.msgid = msgid


class RPCError(Exception):
    """An error answered by the peer: ``code`` is stable, ``message`` says what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_wire(self) -> list[Any]:
        """``[kind, "code: message"]``, the only error shape Neovim reads a message from.

        Neovim accepts ``kind`` 0 (exception: the daemon failed) or 1
        (validation: the request was wrong) and shows any other shape as
        "unknown error", so the stable code travels at the head of the message.
        """
        kind = 0 if self.code == "internal_error" else 1
        return [kind, f"{self.code}: {self.message}"]

    @classmethod
    def from_wire(cls, error: Any) -> RPCError:
        text = str(error[1]) if isinstance(error, list | tuple) and len(error) == 2 else str(error)
        match = _CODED.match(text)
        return cls(match[1], match[2]) if match else cls("error", text)


# "code: message" as to_wire writes it.
_CODED = re.compile(r"([a-z_]+): (.*)\Z", re.DOTALL)


_decoder = msgspec.msgpack.Decoder(Message)
_peer_decoder = msgspec.msgpack.Decoder(Request | PeerResponse | Notification)
_head_decoder = msgspec.msgpack.Decoder(_Head)
_encoder = msgspec.msgpack.Encoder()


def decode_message(frame: bytes, *, peer: bool = False) -> Message | PeerResponse:
    """Decode one whole frame; *peer*: a frame a client sent the daemon, whose responses are PeerResponse.

    Nothing of a frame is built but the message's own fields: ``params`` stay Raw, and a frame that is no
    message is read only as far as its kind and msgid.

    Errors:
        ProtocolError: the frame is not a msgpack-RPC message. ``msgid`` is set
        when the frame looked like a request, so the error can be answered.
    """
    try:
        return (_peer_decoder if peer else _decoder).decode(frame)
    except msgspec.DecodeError as exc:
        msgid = None
        try:
            head = _head_decoder.decode(frame)
            if head.kind == 0:
                msgid = head.msgid
        except msgspec.DecodeError:
            pass
        raise ProtocolError(f"not a msgpack-RPC message: {exc}", msgid) from None


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def escaped(value: Any) -> Any:
    """*value* (builtins and Structs) with each str that msgpack or JSON cannot carry made UTF-8.

    Such a str holds surrogates: the bytes of a name that are not UTF-8 as Python's file functions give them
    (``os.listdir`` of a folder a Latin-1 archive made: ``caf\udce9``). Each escaped byte becomes its
    escape (``caf\\xe9``), any other lone surrogate ``\\udXXX``: printable and exact, where the
    encoding failed and took a listing, an event or a call with it. Structs become what they encode as.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            try:
                return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
                return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, msgspec.Struct):
        value = msgspec.to_builtins(value, builtin_types=(bytes, bytearray, memoryview, msgspec.Raw))
    if isinstance(value, dict):
        return {escaped(k): escaped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escaped(v) for v in value]
    return value


def packed(value: Any, encode: Any = _encoder.encode) -> bytes:
    """``encode(value)`` (msgpack by default; a msgspec JSON encoder's ``encode`` too) of what the daemon
    sends or keeps, with its text made UTF-8 (:func:`escaped`) where it holds a name that is not: every
    encoder of the daemon's output goes through this. No cost while the text is UTF-8."""
    try:
        return encode(value)
    except UnicodeEncodeError:
        return encode(escaped(value))


def request(msgid: int, method: str, params: Any = None) -> bytes:
    args = [] if params is None else [params]
    return encode(Request(msgid, method, msgspec.Raw(encode(args))))


def response(msgid: int, error: Any, result: Any) -> bytes:
    try:
        return encode(Response(msgid, error, result))
    except UnicodeEncodeError:  # a name that is not UTF-8 in a listing (packed)
        return encode(Response(msgid, escaped(error), escaped(result)))


def notification(method: str, params: Any = None) -> bytes:
    args = [] if params is None else [params]
    return encode(Notification(method, msgspec.Raw(packed(args))))


def decode_params(raw: msgspec.Raw, type_: type[T]) -> T:
    """Decode ``[]`` or ``[{...}]`` into the method's params Struct.

    Errors:
        RPCError("invalid_params"): wrong shape, unknown or mistyped fields;
        the message names the field and what was expected.
    """
    try:
        args = msgspec.msgpack.decode(raw, type=list[msgspec.Raw])
    except msgspec.DecodeError as exc:
        raise RPCError("invalid_params", f"params must be an array: {exc}") from None
    if len(args) > 1:
        raise RPCError("invalid_params", f"expected one map argument, got {len(args)} arguments")
    try:
        if not args:
            return msgspec.convert({}, type_)
        return msgspec.msgpack.decode(args[0], type=type_)
    except msgspec.ValidationError as exc:
        raise RPCError("invalid_params", f"invalid params: {exc}") from None
    except msgspec.DecodeError as exc:
        raise RPCError("invalid_params", f"params are not valid msgpack: {exc}") from None


def decode_result(result: Any, type_: type[T]) -> T:
    """A method's result, as a client's ``call`` returned it, into that method's result Struct.

    Errors:
        ProtocolError: the daemon's answer does not fit the Struct (a field missing or mistyped).
    """
    try:
        return msgspec.convert(result, type_)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"the daemon's answer is not a {type_.__name__}: {exc}") from None


def decode_notification_arg(raw: msgspec.Raw) -> Any:
    """The single argument of a notification (events carry one map)."""
    args = msgspec.msgpack.decode(raw)
    return args[0] if isinstance(args, list) and len(args) == 1 else args
