"""The ``hooks:`` key of the agent file and of config.yaml, and Claude Code's settings.json hooks.

Two shapes are read under each event (docs/hooks.md):

- mm's flat entry: ``{matcher, command, timeout}``, ``command`` a list (argv)
  or a string (one program path, or a shell line);
- Claude Code's settings shape: ``{matcher, hooks: [{type: command, command,
  timeout}]}``, each ``command`` a shell line, as Claude Code's hooks reference
  documents it (https://code.claude.com/docs/en/hooks#configuration).

Events take Claude Code's names (``PreToolUse``, ``UserPromptSubmit``…);
mm's ``preToolCall`` / ``postToolCall`` stay as aliases of the two tool events.
``import: claude`` asks for the hooks of Claude Code's own settings files too:
:func:`claude_settings_hooks` reads them, refusing a malformed file with its
line, and skipping (with a warning) what mm does not run.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from .. import paths, patterns
from ..untrusted import (
    MAX_DOCUMENT_DEPTH,
    IntTooLarge,
    TooDeep,
    bounded_int,
    check_json,
    line_of,
    open_regular,
    read_at_most,
)
from .loader import MAX_FILE_BYTES, ConfigError, Document, check_link, parse, remembered, text_digest
from .trust import Trust, command_text

# Seconds an mm-shape hook may run when it names no timeout.
DEFAULT_TIMEOUT = 60.0
# Seconds a Claude Code-shape command may run when it names none: Claude Code's documented default.
CLAUDE_DEFAULT_TIMEOUT = 600.0
# The events mm runs hooks for, by Claude Code's names, in the order of a turn.
EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Notification",
    "Stop",
    "SessionEnd",
)
# Where Claude Code keeps settings with hooks: the user's, then the project's (relative to the project root).
CLAUDE_USER_SETTINGS = Path("~/.claude/settings.json")
CLAUDE_PROJECT_SETTINGS = (Path(".claude/settings.json"), Path(".claude/settings.local.json"))


class HandlerSpec(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename={"status_message": "statusMessage"}
):
    """One handler of Claude Code's shape; mm runs command handlers only."""

    type: Annotated[Literal["command"], msgspec.Meta(description='"command" (mm runs command hooks only)')]
    command: Annotated[str, msgspec.Meta(description="a shell command line, run by bash -c")]
    timeout: Annotated[float, msgspec.Meta(gt=0)] = CLAUDE_DEFAULT_TIMEOUT
    status_message: str | None = None  # Claude Code's spinner text; mm shows none


class HookSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    # mm's shape: glob(s) on tool names, "|" between alternatives, case-insensitive: "bash|write_*".
    # Claude Code's shape (with hooks:): a regex, case-sensitive, "Edit|Write" or "mcp__.*".
    matcher: Annotated[str, msgspec.Meta(description='tool names like "bash|write_*" or "Edit|Write"')] = "*"
    # mm's shape. A list is argv (no shell); a string is one program path, or a shell line run by /bin/sh -c.
    command: Annotated[
        str | list[str] | None,
        msgspec.Meta(description='a list like ["./hooks/guard.sh"] or a string'),
    ] = None
    timeout: Annotated[float, msgspec.Meta(gt=0)] | None = None  # mm's shape; default DEFAULT_TIMEOUT
    # Claude Code's shape: the handlers that run when the matcher matches.
    hooks: list[HandlerSpec] | None = None


def _event(name: str) -> Any:
    return msgspec.field(default_factory=list, name=name)


class HooksSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pre_tool_call: list[HookSpec] = _event("preToolCall")  # mm's alias of PreToolUse
    post_tool_call: list[HookSpec] = _event("postToolCall")  # mm's alias of PostToolUse
    session_start: list[HookSpec] = _event("SessionStart")
    user_prompt_submit: list[HookSpec] = _event("UserPromptSubmit")
    pre_tool_use: list[HookSpec] = _event("PreToolUse")
    post_tool_use: list[HookSpec] = _event("PostToolUse")
    notification: list[HookSpec] = _event("Notification")
    stop: list[HookSpec] = _event("Stop")
    session_end: list[HookSpec] = _event("SessionEnd")
    # `import: claude`: Claude Code's settings.json hooks run too (after config.yaml's, before the agent file's).
    import_: Literal["claude"] | None = msgspec.field(default=None, name="import")

    def entries(self, event: str) -> list[tuple[str, HookSpec]]:
        """The entries of *event* (a name of EVENTS) with the key each was written under, aliases first."""
        out: list[tuple[str, HookSpec]] = []
        for key, name in _event_fields():
            if key == event or _ALIASES.get(key) == event:
                out += [(key, spec) for spec in getattr(self, name)]
        return sorted(out, key=lambda pair: pair[0] == event)  # the alias's entries first

    def events(self) -> set[str]:
        """The events (names of EVENTS) this spec has entries for: one look at its fields, where
        :meth:`entries` of every event looked at all of them for each (most files have no hooks)."""
        return {_ALIASES.get(key, key) for key, name in _event_fields() if getattr(self, name)}


@functools.cache
def _event_fields() -> tuple[tuple[str, str], ...]:
    """(key as written, attribute) of each event list of HooksSpec. msgspec.structs.fields resolves the
    annotations each time it is asked (160 µs, a dozen times a turn): once is enough."""
    return tuple((f.encode_name, f.name) for f in msgspec.structs.fields(HooksSpec) if f.name != "import_")


# mm's own names of the two tool events.
_ALIASES = {"preToolCall": "PreToolUse", "postToolCall": "PostToolUse"}


def hook_commands(spec: HooksSpec) -> list[str]:
    """What *spec* runs, one line a command: ``hook at preToolCall (bash): runs ./guard.sh``."""
    lines = []
    for key, name in _event_fields():
        for hook in getattr(spec, name):
            at = f"hook at {key}" + (f" ({hook.matcher})" if hook.matcher != "*" else "")
            commands = [h.command for h in hook.hooks] if hook.hooks else [hook.command]
            lines += [f"{at}: runs {command_text(command)}" for command in commands]
    return lines


def check_hooks(doc: Document, spec: HooksSpec, at: tuple[Any, ...] = ("hooks",)) -> None:
    """The checks of ``hooks:`` the types cannot express, each error with its line.

    Errors: ConfigError for an entry with neither or both of ``command`` and
    ``hooks``, a ``timeout`` beside ``hooks`` (it goes on each handler), or a
    Claude Code matcher that is not a regular expression (or one too complex to compile, mmd/patterns.py).
    """
    for key, name in _event_fields():
        for index, entry in enumerate(getattr(spec, name)):
            here = (*at, key, index)
            if (entry.command is None) == (entry.hooks is None):
                raise doc.error(
                    here,
                    problem="both command and hooks"
                    if entry.hooks is not None
                    else "neither command nor hooks",
                    expected="command: (mm's shape) or hooks: [{type: command, command: ...}] (Claude Code's)",
                    hint="write one of the two shapes per entry (docs/hooks.md)",
                )
            if entry.hooks is not None and entry.timeout is not None:
                raise doc.error(
                    (*here, "timeout"),
                    problem="a timeout beside hooks:",
                    hint="in Claude Code's shape the timeout goes on each handler: hooks: [{..., timeout: 10}]",
                )
            if entry.hooks is not None:
                _check_regex(doc, (*here, "matcher"), entry.matcher)


def _check_regex(doc: Document, here: tuple[Any, ...], matcher: str) -> None:
    if matcher in ("", "*"):
        return
    try:
        patterns.compile(matcher)  # as the hook's matches() runs it: re's syntax, mmd.patterns' limits
    except re.error as exc:
        raise doc.error(
            here,
            problem=f"not a regular expression: {exc}",
            expected='a tool name or a regex like "Edit|Write" or "mcp__.*"',
        ) from None


# --- Claude Code's settings files --------------------------------------------------------------


class _Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    hooks: HooksSpec = msgspec.field(default_factory=HooksSpec)


def claude_settings_files(project: Path, home: Path | None = None) -> list[Path]:
    """Claude Code's settings files that may hold hooks: the user's, then the project's."""
    user = (
        Path(str(CLAUDE_USER_SETTINGS).replace("~", str(home), 1))
        if home
        else CLAUDE_USER_SETTINGS.expanduser()
    )
    return [user, *(project / p for p in CLAUDE_PROJECT_SETTINGS)]


def claude_settings_hooks(
    path: Path, *, project: Path | None = None, home: Path | None = None, trust: Trust | None = None
) -> tuple[HooksSpec | None, list[str]]:
    """The hooks of the Claude Code settings file *path* (None when it does not exist), and warnings.
    With *project*, the file is that project's (.claude/settings.json): not read through a link that leads
    out of it, the user's config folder and ``~/.claude`` (loader.check_link), and its hooks are None
    unless *trust* admits them (config/trust.py).

    Only the ``hooks`` key is read. Events and handler types mm does not run
    (``PreCompact``, ``type: prompt``…) are skipped with a warning each, so a
    working Claude Code file is never refused for them.

    Errors: ConfigError naming the file and line: not valid JSON, too big or
    too deep, or hooks of a shape Claude Code's reference does not describe.
    """
    if not path.is_file():
        return None, []
    if project is not None:
        claude = (home or paths.home()) / ".claude"
        check_link(
            path.absolute(),
            what="a project's Claude Code settings",
            hint="copy the file here instead of linking it",
            also=(claude,),
        )
    # Built again only when the text changed (loader.remembered); whether a project's file is trusted is
    # asked every time.
    hooks, warnings, said, digest = remembered(path, _settings, reader=_text, read=_read_json_text)
    if (
        hooks is not None
        and project is not None
        and trust is not None
        and not trust.admits(path, digest, list(said))
    ):
        return None, list(warnings)
    return hooks, list(warnings)


def _text(path: str | os.PathLike[str], text: str) -> str:
    return text


def _settings(path: Path, text: str) -> tuple[HooksSpec | None, tuple[str, ...], tuple[str, ...], str]:
    """The hooks of a settings file's *text* (None: it has none), warnings, what they run, the text's digest."""
    data = _decode(path, text)
    if not isinstance(data, dict):
        raise ConfigError(file=path, line=1, field="", expected="a JSON object", found=type(data).__name__)
    hooks = data.get("hooks")
    if hooks is None:
        return None, (), (), ""
    if not isinstance(hooks, dict):
        raise _lines(path, text, data).error(
            ("hooks",), expected="a map of event names to lists", found=type(hooks).__name__
        )
    kept, warnings = _runnable(path, hooks)
    doc = _lines(path, text, {"hooks": kept})
    settings = doc.convert(_Settings)
    check_hooks(doc, settings.hooks)
    return settings.hooks, tuple(warnings), tuple(hook_commands(settings.hooks)), text_digest(text)


def _read_json_text(path: Path) -> str:
    # A regular file only, and never more than the limit read: a repository's settings.json may be a
    # symbolic link to /dev/zero or a FIFO.
    try:
        with open_regular(path) as f:
            raw = read_at_most(f, MAX_FILE_BYTES)
    except OSError as exc:
        raise ConfigError(file=path, line=None, field="", problem=f"cannot read it: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(file=path, line=None, field="", problem=f"larger than {MAX_FILE_BYTES:,} bytes")
    return raw.decode("utf-8", errors="replace")


def _decode(path: Path, text: str) -> Any:
    try:
        check_json(text, what="the settings are", max_depth=MAX_DOCUMENT_DEPTH)  # before json.loads recurses
        return json.loads(text, parse_int=bounded_int)
    except TooDeep as exc:
        raise ConfigError(file=path, line=None, field="", problem=str(exc)) from None
    except IntTooLarge as exc:
        raise ConfigError(file=path, line=line_of(text, exc.text), field="", problem=str(exc)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            file=path,
            line=exc.lineno,
            field="",
            problem=f"not valid JSON: {exc.msg} (column {exc.colno})",
            hint="fix the JSON (Claude Code would refuse it too), or remove `import: claude`",
        ) from None


def _lines(path: Path, text: str, data: dict[str, Any]) -> Document:
    """A Document of *data* with the lines of the fields of *text* where YAML can tell them."""
    try:
        # Valid JSON has no literal tab inside a string, so every tab is whitespace YAML refuses.
        lines = parse(path, text.replace("\t", " ")).lines
    except ConfigError:
        lines = {(): 1}
    return Document(str(path), data, lines)


def _runnable(path: Path, hooks: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The events and command handlers mm runs; a warning for each thing skipped."""
    kept: dict[str, Any] = {}
    warnings: list[str] = []
    for event, groups in hooks.items():
        if event not in EVENTS:
            warnings.append(f"{path}: {event} hooks are not run by mm (it runs {', '.join(EVENTS)})")
            continue
        if not isinstance(groups, list):
            kept[event] = groups  # the loader says what is wrong, with its line
            continue
        kept[event] = [_commands_only(path, event, group, warnings) for group in groups]
    return kept, warnings


def _commands_only(path: Path, event: str, group: Any, warnings: list[str]) -> Any:
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return group
    handlers = []
    for handler in group["hooks"]:
        kind = handler.get("type") if isinstance(handler, dict) else None
        if kind in ("prompt", "agent", "http"):
            warnings.append(f"{path}: a {kind} hook of {event} is not run by mm (command hooks only)")
            continue
        if isinstance(handler, dict):
            # Claude Code's options that change nothing mm does; the rest is checked.
            handler = {k: v for k, v in handler.items() if k not in ("async", "once", "shell")}
        handlers.append(handler)
    return {**group, "hooks": handlers}
