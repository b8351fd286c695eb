"""The params of every RPC method as the decoder checks them: each integer bounded, each path without a NUL.

Walks mmd.api.METHODS, so a method or field added later is checked too.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec
import pytest

from mmd.api import METHODS
from mmd.rpc import RPCError, decode_params, request
from mmd.rpc.messages import decode_message

# The ints msgpack can carry: a decoder sees nothing outside them.
INT64_MIN, UINT64_MAX = -(2**63), 2**64 - 1
# The fields that name a file or folder.
PATH_NAMES = {"cwd", "agent", "path"}


def _members(tp: Any) -> list[Any]:
    """The types a field may hold, with None left out (``int | None`` → ``[int]``)."""
    if get_origin(tp) in (Union, types.UnionType):
        return [m for member in get_args(tp) for m in _members(member)]
    return [] if tp is type(None) else [tp]


def _int_bounds(tp: Any) -> tuple[int | None, int | None] | None:
    """(ge, le) of an int type (None where unbounded); None when *tp* is not an int."""
    base, metas = (get_args(tp)[0], get_args(tp)[1:]) if get_origin(tp) is Annotated else (tp, ())
    if base is not int:
        return None
    ge = next((m.ge for m in metas if isinstance(m, msgspec.Meta) and m.ge is not None), None)
    le = next((m.le for m in metas if isinstance(m, msgspec.Meta) and m.le is not None), None)
    return ge, le


def int_fields() -> list[tuple[str, str, int | None, int | None]]:
    """(method, field, ge, le) for every integer field of every method's params."""
    found = []
    for name, method in METHODS.items():
        for field in msgspec.structs.fields(method.params):
            for member in _members(field.type):
                if (bounds := _int_bounds(member)) is not None:
                    found.append((name, field.name, *bounds))
    return found


def path_fields() -> list[tuple[str, str]]:
    return [
        (name, field.name)
        for name, method in METHODS.items()
        for field in msgspec.structs.fields(method.params)
        if field.name in PATH_NAMES
    ]


def valid_params(method: str) -> dict[str, Any]:
    """The required fields of *method* filled with values that decode."""
    return {f.name: _valid(f) for f in msgspec.structs.fields(METHODS[method].params) if f.required}


def _valid(field: msgspec.structs.FieldInfo) -> Any:
    if field.name in PATH_NAMES:
        return "/"
    if field.name == "decision":
        return "deny"
    return "x" if str in _members(field.type) else 1


def decode(method: str, params: dict[str, Any]) -> Any:
    frame = decode_message(request(1, method, params))
    return decode_params(frame.params, METHODS[method].params)  # type: ignore[union-attr]


def test_the_walk_finds_the_integer_and_path_fields_of_the_protocol() -> None:
    assert {(m, f) for m, f, *_ in int_fields()} >= {("session.list", "limit"), ("consent.revoke", "id")}
    assert ("tools.check", "agent") in path_fields() and ("eval.load", "path") in path_fields()


@pytest.mark.parametrize(("method", "field", "ge", "le"), int_fields())
def test_every_integer_param_is_bounded_within_what_the_store_holds(
    method: str, field: str, ge: int | None, le: int | None
) -> None:
    assert ge is not None and ge >= INT64_MIN and le is not None and le <= 2**63 - 1, (method, field)
    assert getattr(decode(method, {**valid_params(method), field: le}), field) == le
    for bad in (UINT64_MAX, 2**63, ge - 1):
        with pytest.raises(RPCError) as refused:
            decode(method, {**valid_params(method), field: bad})
        assert refused.value.code == "invalid_params" and f"$.{field}" in refused.value.message


@pytest.mark.parametrize(("method", "field"), path_fields())
def test_every_path_param_with_a_nul_byte_is_refused_naming_it(method: str, field: str) -> None:
    with pytest.raises(RPCError) as refused:
        decode(method, {**valid_params(method), field: "/tmp/a\x00b"})
    assert refused.value.code == "invalid_params"
    assert f"{field} holds a NUL byte" in refused.value.message and f"$.{field}" in refused.value.message
    assert getattr(decode(method, {**valid_params(method), field: "/tmp/a b"}), field) == "/tmp/a b"
