"""The tools one turn offers the model, by name, and the specs sent in each request.

Every tool kind (built-in, declared, MCP) ends up here, so the request, the
contract and the consent path are the same for all of them.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .. import contract
from ..kept import Kept
from ..models.base import ToolSpec
from .base import Tool

# Tools' rendered specs, by everything a rendering reads (as msgpack, which keeps a text apart from bytes, a
# date or a number as key, as JSON would not): a turn renders its tools again, and every prompt is a turn:
# ~0.3 ms of the loop's CPU a prompt, most of it copying schemas. The oldest is forgotten past this.
RENDERED = 256
# And by their size: a key is about its schema's size, and a spec holds the schema and its rendered copy. An
# MCP server's schemas go up to 256 KiB each: 256 of them were ~190 MiB kept. The key bytes kept at most (a
# few servers' tools weigh a few hundred KiB):
RENDERED_BYTES = 8 * 1024 * 1024
_rendered: Kept[bytes, ToolSpec] = Kept(RENDERED, RENDERED_BYTES, weigh=len)  # mmd/kept.py


class Registry:
    def __init__(
        self, tools: Iterable[Tool] = (), *, strict: bool = False, placeholders: bool = False
    ) -> None:
        self.tools: dict[str, Tool] = {}
        self.strict = strict  # keep required/enum keywords for providers that enforce them
        self.placeholders = placeholders  # examples shown as placeholders, not values
        self._specs: list[ToolSpec] | None = None
        for tool in tools:
            self.tools[tool.name] = tool

    def __contains__(self, name: str) -> bool:
        return name in self.tools

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def names(self) -> list[str]:
        return list(self.tools)

    def suggest(self, name: str) -> str | None:
        import difflib  # on first use: 0.1 MiB and 0.6 ms of every daemon start, for a mistake's hint

        close = difflib.get_close_matches(name, self.tools, n=1)
        return close[0] if close else None

    def without(self, name: str) -> Registry:
        """The same tools but *name*, rendered the same way."""
        kept = [tool for tool in self.tools.values() if tool.name != name]
        return Registry(kept, strict=self.strict, placeholders=self.placeholders)

    def specs(self) -> list[ToolSpec]:
        """What the model reads: a disabled tool is absent, not merely discouraged.

        Rendered once per registry (one turn): every model step sends the same.
        """
        if self._specs is None:
            self._specs = self._render()
        return self._specs

    def _example(self, tool: Tool) -> dict | None:
        if tool.example is None or not self.placeholders:
            return tool.example
        return contract.shape_example(tool.parameters)

    def _render(self) -> list[ToolSpec]:
        return [self._spec(tool) for tool in self.tools.values()]

    def _spec(self, tool: Tool) -> ToolSpec:
        try:
            read = (tool.name, tool.description, tool.tier, tool.prerequisite, tool.example, tool.parameters)
            key = msgspec.msgpack.encode((*read, self.strict, self.placeholders))
        except (TypeError, msgspec.EncodeError):  # a value msgpack has no form for: rendered each time
            return self._render_one(tool)
        spec = _rendered.get(key)
        if spec is None:
            spec = self._render_one(tool)
            _rendered.put(key, spec)
        return spec  # type: ignore[no-any-return]

    def _render_one(self, tool: Tool) -> ToolSpec:
        return ToolSpec(
            name=tool.name,
            description=contract.render_description(
                tool.description,
                effects=None if tool.tier == "read" else tool.tier,
                prerequisite=tool.prerequisite,
                example=self._example(tool),
            ),
            parameters=contract.render_schema(tool.parameters, strict=self.strict),
            schema=tool.parameters,
        )
