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
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

from mmd import patterns
from mmd.procs import communicate, supervised_process
from mmd.sandbox import Sandbox
from mmd.tools.base import Tool, ToolContext, ToolError, ToolResult
from mmd.tools.builtin._fs import SNIFF_BYTES, display, is_binary, not_found, os_errors, resolve
from mmd.untrusted import bounded_lines, open_regular, walk

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
        try:
            regex = glob_regex(pattern)
        except re.error as e:
            raise ToolError(
                "invalid_pattern",
                f"pattern is not a glob mm can run: {e}.",
                field="pattern",
                fix="Use a shorter, simpler glob such as **/*.py or src/*.[ch].",
            ) from None
        with os_errors(shown):
            found, skipped = await trio.to_thread.run_sync(_walk_glob, root, regex, ctx.limits.timeout)
        return _list_answer(shown, pattern, found, skipped)


def _walk_glob(root: Path, regex: patterns.Pattern, timeout: float) -> tuple[list[str], list[str]]:
    """Relative paths under *root* that *regex* (glob_regex) matches (folders end with /), and the
    folders skipped. Each path is matched by mmd.patterns' deadline, the whole walk ends within *timeout*.

    Errors: ToolError ``slow_pattern`` or ``timeout``; OSError from the walk."""
    whole = patterns.Deadline(timeout)
    found, skipped = [], set()
    for top, dirs, files in walk(root):  # os.walk recurses: a deep tree was a RecursionError
        if whole.left() <= 0:
            raise _slow_listing(whole, whole.seconds)
        rel_top = os.path.relpath(top, root)
        rel_top = "" if rel_top == "." else rel_top + "/"
        for d in list(dirs):
            if d in _SKIPPED_DIRS:
                dirs.remove(d)
                skipped.add(d + "/")
        try:
            each = patterns.SECONDS
            found += [rel_top + d + "/" for d in dirs if regex.match(rel_top + d, whole, each=each)]
            found += [rel_top + f for f in files if regex.match(rel_top + f, whole, each=each)]
        except patterns.TooSlow as e:
            raise _slow_listing(whole, e.seconds) from None
    return sorted(found), sorted(skipped)


def _slow_listing(whole: patterns.Deadline, seconds: float) -> ToolError:
    """The answer to a listing stopped by its deadline: the whole walk's, or one path's."""
    if whole.left() <= 0:
        return ToolError(
            "timeout",
            f"list_files took longer than {whole.seconds:g} seconds.",
            fix="List a smaller path, or use a narrower pattern.",
        )
    return ToolError(
        "slow_pattern",
        f"pattern is too slow to match: one path took longer than {seconds:g} s.",
        field="pattern",
        fix="Use a simpler glob, with fewer * and ? in a row, such as **/*.py.",
    )


# A glob's **/ as a regex: no folder, or any folders.
_ANY_FOLDERS = "(?:.*/)?"


def glob_regex(pattern: str) -> patterns.Pattern:
    """A glob as a regex over /-separated paths: ** crosses folders, * and ? do not.

    Each run of wildcards becomes one regex that matches the same (:func:`_wildcards`), and a **/
    right after another or after a run that is just ``.*`` is left out (it adds nothing), so no two
    quantifiers stand side by side over the same characters: a name's cost to match grows with its
    length, not exponentially; mmd.patterns' deadline bounds what is left.

    Errors: re.error (patterns.TooComplex for a glob too long or complex, mmd/patterns.py).
    """
    if len(pattern) > patterns.MAX_PATTERN_CHARS:
        raise patterns.TooComplex(
            f"too long: {len(pattern):,} characters; the limit is {patterns.MAX_PATTERN_CHARS:,}"
        )
    out: list[str] = []
    run: list[str] = []  # the wildcards since the last other part: "*", "?", "**"
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i) and not pattern.startswith("**/", i):
            run.append("**")
            i += 2
        elif pattern[i] in "*?" and not pattern.startswith("**/", i):
            run.append(pattern[i])
            i += 1
        else:
            _flush(out, run)
            part, i = _glob_part(pattern, i)
            if not (part == _ANY_FOLDERS and out[-1:] in ([_ANY_FOLDERS], [".*"])):
                out.append(part)
    _flush(out, run)
    return patterns.compile("".join(out) + r"\Z", re.DOTALL)


def _flush(out: list[str], run: list[str]) -> None:
    """Add the regex of the wildcards in *run* to *out*, and empty *run*."""
    if not run:
        return
    regex = _wildcards(run)
    if regex.startswith(".*") and out[-1:] == [_ANY_FOLDERS]:
        out.pop()  # (?:.*/)?.* matches what .* does
    out.append(regex)
    run.clear()


def _glob_part(pattern: str, i: int) -> tuple[str, int]:
    """The regex of the glob's part at *i* that is no run of wildcards: **/, a class, one character."""
    if pattern.startswith("**/", i):
        return _ANY_FOLDERS, i + 3
    end = pattern.find("]", i + 2) if pattern[i] == "[" else -1
    if end != -1:
        body = pattern[i + 1 : end]
        return "[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]", end + 1
    return re.escape(pattern[i]), i + 1


def _wildcards(run: list[str]) -> str:
    """A run of ``*``, ``?`` and ``**`` as one regex that matches what the run matches, with no two
    quantifiers over the same characters side by side.

    ``k`` question marks and stars between two ``**`` (or an end of the run) are ``k`` characters
    other than / in a row, or at least ``k`` with a star: ``[^/]{k}``, ``[^/]{k,}``. Next to a ``**``
    (``.*``) a star adds nothing: ``?*?**`` is ``[^/]{2}.*``.
    """
    if "**" not in run:
        return _count(run.count("?"), "*" in run)
    pieces: list[list[str]] = [[]]  # the wildcards before the first **, between two, after the last
    for wildcard in run:
        if wildcard == "**":
            pieces.append([])
        else:
            pieces[-1].append(wildcard)
    inner = [_count(piece.count("?"), False) for piece in pieces[1:-1]]
    return (
        _count(pieces[0].count("?"), False)
        + ".*"
        + "".join(f"{block}.*" for block in inner if block)
        + _count(pieces[-1].count("?"), False)
    )


def _count(least: int, more: bool) -> str:
    """*least* characters other than /, or at least *least* when *more*, as short as the regex goes."""
    if more:
        return "[^/]" + ("*" if least == 0 else "+" if least == 1 else f"{{{least},}}")
    return "" if least == 0 else "[^/]" if least == 1 else f"[^/]{{{least}}}"


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
            found, note = await trio.to_thread.run_sync(_grep_python, root, args, ctx.limits.timeout), ""
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


def _grep_timeout(seconds: float) -> ToolError:
    return ToolError(
        "timeout", f"grep took longer than {seconds:g} seconds.", fix="Search a smaller path, or add a glob."
    )


def _slow_pattern(seconds: float) -> ToolError:
    return ToolError(
        "slow_pattern",
        f"pattern is too slow: searching one line took longer than {seconds:g} s.",
        field="pattern",
        fix="Use a simpler regular expression: a repeat inside a repeat, such as (a+)+ or (\\w+\\s?)*, "
        "can take forever on a line it does not match.",
    )


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
        raise _grep_timeout(ctx.limits.timeout) from None
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


def _grep_python(root: Path, args: dict[str, Any], timeout: float) -> list[str]:
    """The same search without ripgrep: hidden files skipped, .gitignore not read. The model's pattern
    runs on mmd.patterns: each line is searched by its deadline, and the whole search ends within
    *timeout*, as rg's run does.

    Errors: ToolError ``invalid_pattern``, ``slow_pattern``, ``timeout``."""
    try:
        regex = patterns.compile(args["pattern"], re.IGNORECASE if args["ignore_case"] else 0)
    except re.error as e:
        raise _invalid_pattern(f"{e}.") from None
    whole = patterns.Deadline(timeout)
    glob, wanted = args.get("glob"), args["max_results"] + 1  # one more: enough to know there are more
    found: list[str] = []
    for rel, path in _files_under(root):
        if whole.left() <= 0:
            raise _grep_timeout(timeout)
        if glob and not patterns.fnmatch(rel if "/" in glob else path.name, glob):
            continue
        shown = display(args["path"], rel) if rel else args["path"]
        try:
            with contextlib.suppress(OSError):
                found += _grep_file(path, shown, regex, wanted - len(found), whole)
        except patterns.TooSlow as e:
            raise (_grep_timeout(timeout) if whole.left() <= 0 else _slow_pattern(e.seconds)) from None
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
    for top, dirs, files in walk(root):  # os.walk recurses: a deep tree was a RecursionError
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            path = Path(top, name)
            if not path.is_symlink():
                yield path.relative_to(root).as_posix(), path


def _grep_file(
    path: Path, shown: str, regex: patterns.Pattern, most: int, whole: patterns.Deadline
) -> list[str]:
    out: list[str] = []
    # A FIFO or a device in the tree is skipped (NotRegularFile is an OSError), never waited on; a line is
    # searched in its first GREP_LINE_BYTES, so one endless line cannot fill the daemon's memory.
    with open_regular(path) as raw:
        if is_binary(raw.read(SNIFF_BYTES)):
            return out
        raw.seek(0)
        for n, (data, _) in enumerate(bounded_lines(raw, GREP_LINE_BYTES), 1):
            line = data.decode("utf-8", errors="replace")
            if regex.search(line, whole, each=patterns.SECONDS):
                cut = line if len(line) <= GREP_COLUMNS else line[:GREP_COLUMNS] + _OMITTED
                out.append(f"{shown}:{n}:{cut}")
                if len(out) >= most:
                    break
    return out
