"""The built-in tools that read and change one file: read_file, write_file, edit_file.

Arguments reach ``run`` already validated by the contract, defaults filled.
Every failure the model can act on is a :class:`ToolError` that says what
exists instead: a did-you-mean, the closest lines, each match's line number.

Cancellation: file work runs in a worker thread, which finishes before the
cancellation is delivered; a write is atomic, so it never leaves half a file.
"""

# The schema and example dicts are class attributes read as the Tool
# base class's attributes; the tools are stateless and never change them.

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import trio

from mmd.tools.base import Tool, ToolContext, ToolError, ToolResult
from mmd.tools.builtin._fs import (
    LINE_BYTES,
    atomic_write,
    count_lines,
    numbered,
    os_errors,
    refuse_git_internals,
    resolve,
    text_file,
)
from mmd.untrusted import bounded_lines, open_regular, read_at_most

# Lines read_file shows at once by default (and at most).
READ_LIMIT = 2000
# The largest file edit_file reads whole (and writes back): source files are far smaller; a bigger one
# (a log, a dump) is changed with bash.
MAX_EDIT_BYTES = 16 * 1024 * 1024


class ReadFile(Tool):
    name = "read_file"
    description = (
        "Read a text file; each line comes with its number. "
        f"Shows {READ_LIMIT} lines from offset (1 is the first line); the answer ends by saying how to read more. "
        "Use list_files for a folder."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "File path, relative to the working directory.",
            },
            "offset": {
                "type": "integer",
                "minimum": 1,
                "default": 1,
                "description": "Line to start at; 1 is the first.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": READ_LIMIT,
                "default": READ_LIMIT,
                "description": "How many lines to show.",
            },
        },
        "required": ["path"],
    }
    tier = "read"
    example: dict[str, Any] = {"path": "src/app.py", "offset": 1, "limit": 200}

    def echo(self, args: dict[str, Any]) -> str:
        offset, limit = args.get("offset", 1), args.get("limit", READ_LIMIT)
        span = "" if (offset, limit) == (1, READ_LIMIT) else f":{offset}-{offset + limit - 1}"
        return f"read_file {args.get('path', '')}{span}"

    def paths(self, args: dict[str, Any], ctx: ToolContext) -> list[Path]:
        """The file this call reads (the consent gate asks when it is outside the project)."""
        return [resolve(ctx, args["path"])]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        p = resolve(ctx, shown)
        with os_errors(shown):
            return await trio.to_thread.run_sync(_read, ctx, p, shown, args["offset"], args["limit"])


def _read(ctx: ToolContext, p: Path, shown: str, offset: int, limit: int) -> ToolResult:
    text_file(ctx, p, shown)
    shown_lines, total = [], 0
    # Lines end at LF, as edit_file counts them; a line of any length costs LINE_BYTES of memory.
    with open_regular(p) as f:
        for total, (line, chars) in enumerate(bounded_lines(f, LINE_BYTES), 1):
            if offset <= total < offset + limit:
                # A line read whole is measured as decoded (U+FFFD for a stray byte), a longer one by its count.
                whole = None if len(line) < LINE_BYTES else chars
                shown_lines.append(numbered(total, line.decode("utf-8", errors="replace"), whole))
    if total == 0:
        return ToolResult(ok=True, content=f"({shown} is empty.)", data={"path": str(p), "total_lines": 0})
    if offset > total:
        raise ToolError(
            "offset_past_end",
            f"offset {offset} is past the end: {shown} has {total} lines.",
            field="offset",
            fix=f"Use an offset from 1 to {total}.",
        )
    end = offset + len(shown_lines) - 1
    if end < total:
        note = f"(Lines {offset}-{end} of {total}. To read more, call read_file with offset {end + 1}.)"
    else:
        note = f"(Lines {offset}-{end} of {total}: the end of the file.)"
    data = {"path": str(p), "total_lines": total, "lines": [offset, end]}
    return ToolResult(ok=True, content="\n".join([*shown_lines, note]), data=data)


class WriteFile(Tool):
    name = "write_file"
    description = (
        "Create a text file, or replace all of an existing one, with content. Creates missing folders. "
        "To change part of an existing file, use edit_file."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "File path, relative to the working directory.",
            },
            "content": {"type": "string", "description": "The whole new content of the file."},
        },
        "required": ["path", "content"],
    }
    tier = "write"
    example: dict[str, Any] = {"path": "notes/todo.md", "content": "# To do\n- write the tests\n"}

    def echo(self, args: dict[str, Any]) -> str:
        return f"write_file {args.get('path', '')} ({len(str(args.get('content', '')).encode())} bytes)"

    def paths(self, args: dict[str, Any], ctx: ToolContext) -> list[Path]:
        """The file this call writes (the consent gate asks when it is outside the project)."""
        return [resolve(ctx, args["path"])]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        with os_errors(shown):
            return await trio.to_thread.run_sync(_write, ctx, resolve(ctx, shown), shown, args["content"])


def _write(ctx: ToolContext, p: Path, shown: str, content: str) -> ToolResult:
    refuse_git_internals(ctx, p, shown)
    if p.is_dir():
        raise ToolError("is_directory", f"{shown} is a folder; write_file writes a file.", field="path")
    before = p.stat().st_size if p.exists() else None
    data = content.encode()
    atomic_write(p, data)
    size = f"{len(data)} bytes, {count_lines(content)} lines"
    text = (
        f"Created {shown} ({size})."
        if before is None
        else f"Overwrote {shown} ({size}; it had {before} bytes)."
    )
    return ToolResult(
        ok=True, content=text, data={"path": str(p), "bytes": len(data), "created": before is None}
    )


class EditFile(Tool):
    name = "edit_file"
    description = (
        "Replace exact text in a file. old_text must match the file exactly, indentation included, "
        "and appear once; set replace_all to change every match. Read the file first."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "File path, relative to the working directory.",
            },
            "old_text": {
                "type": "string",
                "minLength": 1,
                "description": "Text now in the file, copied exactly, without read_file's line numbers.",
            },
            "new_text": {"type": "string", "description": "Text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "default": False,
                "description": "Replace every match, not just one.",
            },
        },
        "required": ["path", "old_text", "new_text"],
    }
    tier = "write"
    example: dict[str, Any] = {"path": "src/app.py", "old_text": "timeout = 30", "new_text": "timeout = 60"}

    def echo(self, args: dict[str, Any]) -> str:
        return f"edit_file {args.get('path', '')}" + (" (every match)" if args.get("replace_all") else "")

    def paths(self, args: dict[str, Any], ctx: ToolContext) -> list[Path]:
        """The file this call changes (the consent gate asks when it is outside the project)."""
        return [resolve(ctx, args["path"])]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        p = resolve(ctx, shown)
        with os_errors(shown):
            return await trio.to_thread.run_sync(
                _edit, ctx, p, shown, args["old_text"], args["new_text"], args["replace_all"]
            )


def _edit(ctx: ToolContext, p: Path, shown: str, old: str, new: str, replace_all: bool) -> ToolResult:
    text_file(ctx, p, shown)
    refuse_git_internals(ctx, p, shown)
    try:
        with open_regular(p) as f:
            size = os.fstat(f.fileno()).st_size
            data = read_at_most(f, MAX_EDIT_BYTES, size) if size <= MAX_EDIT_BYTES else b""
            if size > MAX_EDIT_BYTES or len(data) > MAX_EDIT_BYTES:  # grown since the look: never cut it
                raise ToolError(
                    "file_too_large",
                    f"{shown} is {max(size, len(data)):,} bytes; edit_file edits files up to "
                    f"{MAX_EDIT_BYTES:,} bytes.",
                    cls="terminal",
                    fix="Change it with bash (sed, or a short script) instead.",
                )
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        reason = f"{shown} is not UTF-8 text (byte {e.start}); edit_file would damage it."
        raise ToolError("binary_file", reason, cls="terminal") from None
    # A file with only CRLF endings is edited in LF and written back in CRLF,
    # so a model that writes "\n" still matches.
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    if crlf:
        text, old, new = (s.replace("\r\n", "\n") for s in (text, old, new))
    if old == new:
        raise ToolError(
            "no_change",
            "old_text and new_text are the same.",
            field="new_text",
            fix="Put the new text in new_text.",
        )
    starts = _find_all(text, old)
    if not starts:
        raise _no_match(text, old, shown)
    lines = [text.count("\n", 0, s) + 1 for s in starts]
    if len(starts) > 1 and not replace_all:
        raise ToolError(
            "several_matches",
            f"old_text appears {len(starts)} times in {shown}, at lines {', '.join(map(str, lines))}.",
            field="old_text",
            fix="Add surrounding lines to make old_text unique, or set replace_all to true.",
        )
    result, new_starts = _replace(text, old, new, starts)
    atomic_write(p, (result.replace("\n", "\r\n") if crlf else result).encode())
    return ToolResult(
        ok=True, content=_edit_summary(shown, result, new, new_starts), data={"path": str(p), "lines": lines}
    )


def _find_all(text: str, old: str) -> list[int]:
    """Start offsets of the non-overlapping matches, as str.replace sees them."""
    starts, i = [], text.find(old)
    while i >= 0:
        starts.append(i)
        i = text.find(old, i + len(old))
    return starts


def _replace(text: str, old: str, new: str, starts: list[int]) -> tuple[str, list[int]]:
    pieces, new_starts, last, shift = [], [], 0, 0
    for s in starts:
        pieces += [text[last:s], new]
        new_starts.append(s + shift)
        shift += len(new) - len(old)
        last = s + len(old)
    pieces.append(text[last:])
    return "".join(pieces), new_starts


def _edit_summary(shown: str, result: str, new: str, new_starts: list[int]) -> str:
    """Which lines changed, and a few lines around the first three changes."""
    lines = result.split("\n")
    spans = []
    for s in new_starts:
        first = result.count("\n", 0, s) + 1
        spans.append((first, first + max(0, count_lines(new) - 1)))
    where = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    several = len(spans) > 1
    plural = "s" if several or spans[0][0] != spans[0][1] else ""
    out = [
        f"Edited {shown}: replaced {len(spans)} occurrence{'s' if several else ''} at line{plural} {where}."
    ]
    for i, (a, b) in enumerate(spans[:3]):
        if i:
            out.append("  ...")
        lo, hi = max(1, a - 2), min(len(lines), b + 2)
        out += [numbered(n, lines[n - 1]) for n in range(lo, hi + 1)]
    if len(spans) > 3:
        out.append(f"  ... and {len(spans) - 3} more.")
    return "\n".join(out)


def _no_match(text: str, old: str, shown: str) -> ToolError:
    """old_text is not in the file: show where the file looks most like it."""
    fix = "old_text must match the file exactly, spaces and indentation included."
    if re.match(r"\s*\d+\t", old):
        fix += " It seems to start with a line number from read_file: leave the numbers and the tab out."
    best = _closest_lines(text.split("\n"), old.strip("\n").split("\n"))
    if best is None:
        reason = f"old_text was not found in {shown}, and nothing there looks like it."
        return ToolError(
            "no_match", reason, field="old_text", fix=fix + " Read the file again with read_file."
        )
    start, window = best
    shown_lines = "\n".join(numbered(start + i, line) for i, line in enumerate(window))
    end = start + len(window) - 1
    where = f"line {start}" if end == start else f"lines {start}-{end}"
    reason = f"old_text was not found in {shown}. The closest text is at {where}:\n{shown_lines}"
    return ToolError("no_match", reason, field="old_text", fix=fix + " Copy old_text from the lines above.")


def _closest_lines(lines: list[str], want: list[str]) -> tuple[int, list[str]] | None:
    """The window of len(want) lines most like *want* (1-based start), if any is close enough."""
    import difflib  # on first use: 0.1 MiB and 0.6 ms of every daemon start, for a missed edit's hint

    size = min(len(want), 12)
    matcher = difflib.SequenceMatcher(None, b="\n".join(want[:size]))
    best, best_at = 0.5, None  # below this ratio, nothing looks like it
    for i in range(max(1, len(lines) - size + 1)):
        matcher.set_seq1("\n".join(lines[i : i + size]))
        if matcher.real_quick_ratio() <= best or matcher.quick_ratio() <= best:
            continue  # cheap upper bounds: this window cannot do better
        ratio = matcher.ratio()
        if ratio > best:
            best, best_at = ratio, i
    return None if best_at is None else (best_at + 1, lines[best_at : best_at + size])
