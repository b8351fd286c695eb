"""The tools one turn offers the model, by name, and the specs sent in each request.

Every tool kind (built-in, declared, MCP) ends up here, so the request, the
contract and the consent path are the same for all of them.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import contract
from ..models.base import ToolSpec
from .base import Tool


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
        return [
            ToolSpec(
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
            for tool in self.tools.values()
        ]
