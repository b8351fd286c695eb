"""The protocol and its documentation agree: every method, params and result struct, field and error code raised is in docs/protocol.md.

The protocol spoken over a real daemon's socket is in tests/e2e/test_protocol.py.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmd.api import METHODS
from mmd.rpc import RPCError

from ...paths import ROOT


def _result_type(handler: Any) -> type:
    """The class a handler's return annotation names, looked up where the handler is defined."""
    annotation = handler.__annotations__["return"]
    return handler.__globals__[annotation] if isinstance(annotation, str) else annotation


def _doc_section(docs: str, name: str) -> str:
    """The text of the `### ` section whose heading names method *name*."""
    for section in docs.split("\n### ")[1:]:
        heading = section.split("\n", 1)[0]
        if f"`{name} " in heading or f"`{name}`" in heading:
            return section
    raise AssertionError(f"docs/protocol.md has no section for {name}")


def test_every_error_code_raised_is_documented():
    import re

    raised = set()
    for path in ROOT.joinpath("mmd").rglob("*.py"):
        raised |= set(re.findall(r'RPCError\(\s*"(\w+)"', path.read_text()))
    docs = ROOT.joinpath("docs", "protocol.md").read_text()
    assert raised and all(f"| `{name}` |" in docs for name in raised), raised


def test_error_shape_round_trips():
    wire = RPCError("busy", "session x: wait: or cancel").to_wire()
    assert wire == [1, "busy: session x: wait: or cancel"]
    back = RPCError.from_wire(wire)
    assert (back.code, back.message) == ("busy", "session x: wait: or cancel")
    assert RPCError("internal_error", "boom").to_wire()[0] == 0


def test_every_method_is_documented():

    docs = ROOT.joinpath("docs", "protocol.md").read_text()
    missing = [name for name in METHODS if f"`{name} " not in docs and f"`{name}`" not in docs]
    assert not missing, missing


def test_every_method_takes_a_params_struct_and_returns_a_result_struct_of_rpc():

    for name, method in METHODS.items():
        assert issubclass(method.params, msgspec.Struct), name
        assert method.params.__module__ == "mmd.rpc.methods", name
        result = _result_type(method.handler)
        assert issubclass(result, msgspec.Struct), (name, result)
        assert result.__module__ == "mmd.rpc.results", (name, result)


def test_a_stored_message_and_its_wire_struct_have_the_same_fields():
    from mmd.models.base import Message, ToolCall
    from mmd.rpc.results import ChatMessage, ChatToolCall

    assert ChatMessage.__struct_fields__ == Message.__struct_fields__
    assert ChatToolCall.__struct_fields__ == ToolCall.__struct_fields__


def test_the_docs_name_every_field_of_each_params_and_result_struct():
    import re

    docs = (ROOT / "docs" / "protocol.md").read_text()
    missing = []
    for name, method in METHODS.items():
        section = _doc_section(docs, name)
        heading = section.split("\n", 1)[0]
        fields = [(f, heading) for f in method.params.__struct_fields__]
        fields += [(f, section) for f in _result_type(method.handler).__struct_fields__]
        missing += [f"{name}: {f}" for f, text in fields if not re.search(rf"\b{f}\b", text)]
    assert not missing, missing
