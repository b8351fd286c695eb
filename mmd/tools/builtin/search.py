"""The built-in tools that find files and text: list_files and grep.

grep runs ripgrep (``rg``) when it is installed, else the same search in
Python (hidden files skipped, .gitignore not read). Both answer
``path:line:text``, paths as the model would write them.

Cancellation: list_files walks in a worker thread, which finishes before the
cancellation is delivered; grep's ``rg`` runs under the supervisor, which stops its group.
"""

# The schema and example dicts are class attributes read as the Tool
# base class's attributes; the tools are stateless and never change them.

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

from mmd.procs import communicate, supervised_process
from mmd.sandbox import Sandbox
from mmd.tools.base import Tool, ToolContext, ToolError, ToolResult
from mmd.tools.builtin._fs import SNIFF_BYTES, display, is_binary, not_found, os_errors, resolve
from mmd.untrusted import bounded_lines, open_regular

# Entries list_files shows at most.
LIST_CAP = 500
# Characters of a matching line grep shows (rg's --max-columns), and its marker.
GREP_COLUMNS = 500
# Bytes of ripgrep's complaints kept (a line each for unreadable files, and its first is shown).
RG_STDERR_BYTES = 64 * 1024
# Bytes of a line searched without ripgrep (ripgrep searches all of it; a longer line is rare in text).
GREP_LINE_BYTES = 1024 * 1024
_OMITTED = " [... omitted end of long line]"
# Folders list_files skips unless asked to list inside them: version control
# internals and bulky generated trees that would crowd out the real files.
_SKIPPED_DIRS = frozenset(
    [
        ".git",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    ]
)


class ListFiles(Tool):
    name = "list_files"
    description = (
        "List the files and folders whose path matches a glob pattern, sorted; folders end with /. "
        "** matches any depth: **/*.py finds Python files in every subfolder, *.py only at the top. "
        f"Shows at most {LIST_CAP}; skips .git and bulky generated folders such as node_modules."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "default": "**/*",
                "description": "Glob pattern, relative to path.",
            },
            "path": {
                "type": "string",
                "default": ".",
                "description": "Folder to list, relative to the working directory.",
            },
        },
    }
    tier = "read"
    example: dict[str, Any] = {"pattern": "**/*.py", "path": "src"}

    def echo(self, args: dict[str, Any]) -> str:
        path = args.get("path", ".")
        return f"list_files {args.get('pattern', '**/*')}" + ("" if path == "." else f" in {path}")

    def paths(self, args: dict[str, Any], ctx: ToolContext) -> list[Path]:
        """The folder this call lists (the consent gate asks when it is outside the project)."""
        return [resolve(ctx, args["path"])]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown, pattern = args["path"], args["pattern"]
        if pattern.startswith("/"):
            raise ToolError(
                "invalid_pattern",
                "pattern is relative to path; it cannot start with /.",
                field="pattern",
                fix='Put the folder in path and the rest in pattern, e.g. {"path": "/var/log", "pattern": "**/*.log"}.',
            )
        root = resolve(ctx, shown)
        if not root.exists():
            raise not_found(ctx, shown)
        if not root.is_dir():
            raise ToolError(
                "not_a_directory",
                f"{shown} is a file, not a folder.",
                field="path",
                fix="Use read_file to read it.",
            )
        with os_errors(shown):
            found, skipped = await trio.to_thread.run_sync(_walk_glob, root, pattern)
        return _list_answer(shown, pattern, found, skipped)


def _walk_glob(root: Path, pattern: str) -> tuple[list[str], list[str]]:
    """Relative paths under *root* matching *pattern* (folders end with /), and the folders skipped."""
    regex = _glob_regex(pattern)
    found, skipped = [], set()
    for top, dirs, files in os.walk(root):
        rel_top = os.path.relpath(top, root)
        rel_top = "" if rel_top == "." else rel_top + "/"
        for d in list(dirs):
            if d in _SKIPPED_DIRS:
                dirs.remove(d)
                skipped.add(d + "/")
        found += [rel_top + d + "/" for d in dirs if regex.match(rel_top + d)]
        found += [rel_top + f for f in files if regex.match(rel_top + f)]
    return sorted(found), sorted(skipped)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex over /-separated paths: ** crosses folders, * and ? do not."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] in "*?":
            out.append("[^/]*" if pattern[i] == "*" else "[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _list_answer(shown: str, pattern: str, found: list[str], skipped: list[str]) -> ToolResult:
    lines = [display(shown, rel) for rel in found[:LIST_CAP]]
    if not found:
        lines.append(f"No files or folders match {pattern} in {shown}.")
        if "/" not in pattern and "**" not in pattern:
            lines.append(f"To look in every subfolder, use the pattern **/{pattern}.")
    if len(found) > LIST_CAP:
        lines.append(
            f"({LIST_CAP} of {len(found)} entries shown; narrow the pattern or the path to see the rest.)"
        )
    if skipped:
        lines.append(f"(Not searched: {', '.join(skipped)}; give one as path to list inside it.)")
    return ToolResult(ok=True, content="\n".join(lines), data={"count": len(found)})


class Grep(Tool):
    name = "grep"
    description = (
        "Search the contents of files with a regular expression; answers path:line:text for each matching line. "
        "glob limits which files are searched, e.g. *.py. Hidden files and files ignored by git are skipped."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Regular expression to look for."},
            "path": {"type": "string", "default": ".", "description": "File or folder to search."},
            "glob": {"type": "string", "description": "Only search files matching this glob, e.g. *.py."},
            "ignore_case": {
                "type": "boolean",
                "default": False,
                "description": "Match upper and lower case alike.",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": 1000,
                "default": 200,
                "description": "Most matching lines to show.",
            },
        },
        "required": ["pattern"],
    }
    tier = "read"
    example: dict[str, Any] = {"pattern": "def main", "path": "src", "glob": "*.py"}

    def echo(self, args: dict[str, Any]) -> str:
        parts = ["grep", shlex.quote(str(args.get("pattern", ""))), str(args.get("path", "."))]
        if args.get("glob"):
            parts += ["--glob", shlex.quote(args["glob"])]
        return " ".join(parts + (["-i"] if args.get("ignore_case") else []))

    def paths(self, args: dict[str, Any], ctx: ToolContext) -> list[Path]:
        """The file or folder this call searches (the consent gate asks when it is outside the project)."""
        return [resolve(ctx, args["path"])]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        root = resolve(ctx, shown)
        if not root.exists():
            raise not_found(ctx, shown)
        rg = shutil.which("rg")
        if rg:
            found, note = await _grep_rg(rg, args, ctx)
        else:
            found, note = await trio.to_thread.run_sync(_grep_python, root, args), ""
        limit = args["max_results"]
        lines = found[:limit]
        if not lines:
            where = shown + (f" (files matching {args['glob']})" if args.get("glob") else "")
            lines.append(f"No matches for {args['pattern']} in {where}.")
        if len(found) > limit:
            lines.append(
                f"(Stopped after {limit} matching lines; there are more. Narrow the pattern, path or glob.)"
            )
        if note:
            lines.append(note)
        return ToolResult(ok=True, content="\n".join(lines), data={"matches": min(len(found), limit)})


def _invalid_pattern(detail: str) -> ToolError:
    return ToolError(
        "invalid_pattern",
        f"pattern is not a valid regular expression: {detail}",
        field="pattern",
        fix=r"Escape special characters such as ( [ { . * + ? with a backslash, e.g. foo\(.",
    )


async def _grep_rg(rg: str, args: dict[str, Any], ctx: ToolContext) -> tuple[list[str], str]:
    cmd = [rg, "--no-config", "--line-number", "--no-heading", "--with-filename", "--color", "never"]
    cmd += ["--sort", "path", "--max-columns", str(GREP_COLUMNS), "--max-columns-preview"]
    cmd += ["--max-count", str(args["max_results"] + 1)]  # per file: enough to know there are more
    if args["ignore_case"]:
        cmd.append("--ignore-case")
    if args.get("glob"):
        cmd += ["--glob", args["glob"]]
    path = args["path"]  # as given, so rg prints paths as the model wrote them; no shell expands ~ here
    cmd += ["--regexp", args["pattern"], "--", str(resolve(ctx, path)) if path.startswith("~") else path]
    try:
        with trio.fail_after(ctx.limits.timeout):
            returncode, stdout, stderr = await _run_rg(cmd, ctx, args["max_results"] + 1)
    except trio.TooSlowError:
        raise ToolError(
            "timeout",
            f"grep took longer than {ctx.limits.timeout:g} seconds.",
            fix="Search a smaller path, or add a glob.",
        ) from None
    err = stderr.decode(errors="replace").strip()
    if returncode == 2 and "regex" in err:
        raise _invalid_pattern(" ".join(line.strip() for line in err.splitlines() if line.strip()))
    found = stdout.decode(errors="replace").splitlines()
    if args["path"] in (".", "./"):
        found = [line.removeprefix("./") for line in found]
    if returncode == 2 and not found:
        raise ToolError(
            "grep_failed",
            f"grep failed: {err.splitlines()[0] if err else 'no reason given'}.",
            cls="terminal",
        )
    note = f"(Some files could not be searched: {err.splitlines()[0]})" if returncode == 2 else ""
    return found, note


async def _run_rg(cmd: list[str], ctx: ToolContext, wanted: int) -> tuple[int | None, bytes, bytes]:
    """Run rg under the supervisor, as every child of the daemon; its exit code (None once *wanted* lines
    came: it is then stopped), stdout and stderr.

    --max-count bounds the lines of each file only: a pattern such as "." over a large tree prints
    gigabytes before the timeout, so the reading stops once the lines shown, and one more, have come
    (--sort path prints them in order: the first are the ones shown)."""
    lines = 0

    def enough(chunk: bytes) -> bool:
        nonlocal lines
        lines += chunk.count(b"\n")
        return lines >= wanted

    # rg only reads: in a turn that has a sandbox it runs read-only with no network, whatever the turn's mode.
    box = (
        Sandbox(mode="read-only", network=False) if ctx.sandbox is not None and ctx.sandbox.confined else None
    )
    async with supervised_process(
        cmd,
        cwd=ctx.cwd,
        env={},
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_env=ctx.pass_env,
        sandbox=box,
    ) as proc:
        stdout, stderr, code = await communicate(proc, stop=enough, max_stderr=RG_STDERR_BYTES)
    return code, stdout, stderr


def _grep_python(root: Path, args: dict[str, Any]) -> list[str]:
    """The same search without ripgrep: hidden files skipped, .gitignore not read."""
    try:
        regex = re.compile(args["pattern"], re.IGNORECASE if args["ignore_case"] else 0)
    except re.error as e:
        raise _invalid_pattern(f"{e}.") from None
    glob, wanted = args.get("glob"), args["max_results"] + 1  # one more: enough to know there are more
    found: list[str] = []
    for rel, path in _files_under(root):
        if glob and not fnmatch.fnmatchcase(rel if "/" in glob else path.name, glob):
            continue
        shown = display(args["path"], rel) if rel else args["path"]
        with contextlib.suppress(OSError):
            found += _grep_file(path, shown, regex, wanted - len(found))
        if len(found) >= wanted:
            break
    return found


def _files_under(root: Path) -> Iterator[tuple[str, Path]]:
    """(path relative to root, path) of each file, sorted, hidden ones left out; "" for root itself.

    Symbolic links met on the way are not followed, as ripgrep does not: a link in the
    project may point outside it, where reading needs consent (the gate checked ``root``).
    """
    if not root.is_dir():
        yield "", root
        return
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            path = Path(top, name)
            if not path.is_symlink():
                yield path.relative_to(root).as_posix(), path


def _grep_file(path: Path, shown: str, regex: re.Pattern[str], most: int) -> list[str]:
    out: list[str] = []
    # A FIFO or a device in the tree is skipped (NotRegularFile is an OSError), never waited on; a line is
    # searched in its first GREP_LINE_BYTES, so one endless line cannot fill the daemon's memory.
    with open_regular(path) as raw:
        if is_binary(raw.read(SNIFF_BYTES)):
            return out
        raw.seek(0)
        for n, (data, _) in enumerate(bounded_lines(raw, GREP_LINE_BYTES), 1):
            line = data.decode("utf-8", errors="replace")
            if regex.search(line):
                cut = line if len(line) <= GREP_COLUMNS else line[:GREP_COLUMNS] + _OMITTED
                out.append(f"{shown}:{n}:{cut}")
                if len(out) >= most:
                    break
    return out
