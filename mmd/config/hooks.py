"""The ``hooks:`` key of the agent file and of config.yaml, as the loader reads it."""

from __future__ import annotations

from typing import Annotated

import msgspec

# Seconds a hook may run when it names no timeout (Claude Code's default too).
DEFAULT_TIMEOUT = 60.0


class HookSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # Glob(s) on tool names, "|" between alternatives, case-insensitive: "bash|write_*".
    matcher: Annotated[str, msgspec.Meta(description='tool-name globs like "bash|write_*"')] = "*"
    # A list is argv (no shell); a string is one program path, or a shell line run by /bin/sh -c.
    command: Annotated[
        str | list[str],
        msgspec.Meta(description='a list like ["./hooks/guard.sh"] or a string'),
    ]
    timeout: Annotated[float, msgspec.Meta(gt=0)] = DEFAULT_TIMEOUT


class HooksSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    pre_tool_call: list[HookSpec] = []  # key preToolCall
    post_tool_call: list[HookSpec] = []  # key postToolCall
