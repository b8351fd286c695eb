"""The tools of a turn and their specs (mmd/tools/registry.py): rendered once for every turn that offers them."""

from __future__ import annotations

from typing import Any

from mmd.tools.base import Tool, ToolContext, ToolResult
from mmd.tools.registry import Registry


class Echo(Tool):
    name = "echo"
    description = "Say a text back."
    tier = "read"

    def __init__(self, parameters: dict[str, Any] | None = None, description: str | None = None) -> None:
        self.parameters = parameters or {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "What to say", "maxLength": 9}},
            "required": ["text"],
        }
        if description is not None:
            self.description = description

    def echo(self, args: dict[str, Any]) -> str:
        return f"echo {args['text']}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(ok=True, content=args["text"])


def test_a_tool_rendered_for_one_turn_is_not_rendered_again_for_the_next() -> None:
    # Every prompt is a turn with a registry of its own: the copy of each schema was most of the CPU.
    first, second = Registry([Echo()]).specs()[0], Registry([Echo()]).specs()[0]
    assert second is first
    assert first.parameters["properties"]["text"] == {
        "type": "string",
        "description": "What to say. Required. At most 9 characters.",
    }
    assert first.schema == Echo().parameters  # the whole schema, for grammars


def test_whatever_the_rendering_reads_makes_another_spec() -> None:
    plain = Registry([Echo()]).specs()[0]
    strict = Registry([Echo()], strict=True).specs()[0]
    assert strict is not plain and strict.parameters["required"] == ["text"]
    worded = Registry([Echo(description="Say it twice.")]).specs()[0]
    assert worded.description.startswith("Say it twice.") and plain.description.startswith("Say a text back.")
    other = Echo({"type": "object", "properties": {"words": {"type": "integer"}}})
    assert list(Registry([other]).specs()[0].parameters["properties"]) == ["words"]


def test_values_json_would_write_alike_make_other_specs() -> None:
    text = Echo({"type": "object", "properties": {"x": {"type": "string", "enum": ["1"]}}}, description="d")
    number = Echo({"type": "object", "properties": {"x": {"type": "string", "enum": [1]}}}, description="d")
    keyed = Echo({"type": "object", "properties": {"x": {"type": "string", 1: "a"}}}, description="d")
    named = Echo({"type": "object", "properties": {"x": {"type": "string", "1": "a"}}}, description="d")
    assert Registry([text]).specs()[0] is not Registry([number]).specs()[0]
    assert Registry([keyed]).specs()[0] is not Registry([named]).specs()[0]


def test_a_schema_msgpack_cannot_hold_is_rendered_each_time() -> None:
    odd = {"type": "object", "properties": {"x": {"type": "string", "x-origin": object()}}}
    one, two = Registry([Echo(odd)]).specs()[0], Registry([Echo(odd)]).specs()[0]
    assert one is not two and one.description == two.description
    assert one.parameters["properties"]["x"]["description"] == "Optional."


def test_a_builtins_list_that_repeats_a_name_makes_each_tool_once(monkeypatch) -> None:
    """An agent file's builtins: needs no trust and may repeat a name up to the YAML value limit: every prompt
    made a tool for each entry (20,000 for a file naming bash 20,000 times), for the registry to keep one."""
    from mmd.tools import builtin

    made: list[str] = []
    real = builtin._make
    monkeypatch.setattr(builtin, "_make", lambda name, skills: made.append(name) or real(name, skills))
    tools = builtin.make_builtins(["bash", "read_file"] * 10_000)
    assert [t.name for t in tools] == ["bash", "read_file"] and made == ["bash", "read_file"]


def test_the_specs_kept_are_bounded_by_their_size(monkeypatch) -> None:
    """An MCP server's schemas go up to 256 KiB each: 256 specs of that kept ~190 MiB. The keys' bytes are
    bounded too now, the oldest used let go; a spec still in use is rendered again, the same."""
    from mmd.tools import registry

    monkeypatch.setattr(registry._rendered, "weight", 64 * 1024)
    big = [
        Echo({"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 20_000}}})
        for i in range(12)
    ]
    specs = [Registry([tool]).specs()[0] for tool in big]
    assert sum(len(key) for key in registry._rendered) == registry._rendered.held <= 64 * 1024
    assert Registry([big[-1]]).specs()[0] is specs[-1]  # the newest kept
    again = Registry([big[0]]).specs()[0]  # let go: rendered again
    assert again is not specs[0] and again == specs[0]
