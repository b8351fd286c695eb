"""What the file tools share: paths, did-you-mean, binary sniffing, atomic writes.

Paths are relative to the call's working directory (``ctx.cwd``); absolute
paths and ``~`` work too. Nothing here confines a path: the tools run with
the user's rights, like ``bash``.
"""

from __future__ import annotations

import codecs
import contextlib
import mimetypes
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from mmd.contract import closest
from mmd.tools.base import ToolContext, ToolError
from mmd.untrusted import first_names, open_regular

# The longest line shown whole; a longer one is cut with a note.
MAX_LINE = 2000
# Bytes of a line read to show it: MAX_LINE characters at most 4 bytes each, and one more character.
LINE_BYTES = 4 * (MAX_LINE + 1)
# Bytes looked at to tell a binary file from a text file.
SNIFF_BYTES = 8192
# Names of a folder a missing path's did-you-mean is chosen from, the first the file system lists: a
# project's folder of a million entries was listed whole and sorted, on the event loop, for three names.
MAX_SIBLINGS = 2000
# Leading bytes of common binary formats, for the binary_file answer.
_MAGIC = {
    b"\x7fELF": "ELF executable",
    b"\x89PNG": "PNG image",
    b"\xff\xd8\xff": "JPEG image",
    b"GIF8": "GIF image",
    b"%PDF": "PDF document",
    b"PK\x03\x04": "zip archive",
    b"\x1f\x8b": "gzip archive",
    b"SQLite format 3": "SQLite database",
}


def resolve(ctx: ToolContext, path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else ctx.cwd / p


def refuse_git_internals(ctx: ToolContext, p: Path, shown: str) -> None:
    """Under a sandbox, refuse a write to *p* when it is, links resolved, in a ``.git`` or one: git runs
    hooks and config entries from there with the person's rights, outside the sandbox, and no diff shows
    them (a confined command's changes there are put back: mmd/sandbox/gitguard.py)."""
    if ctx.sandbox is None or not ctx.sandbox.confined or ".git" not in Path(os.path.realpath(p)).parts:
        return
    raise ToolError(
        "git_internals",
        f"{shown} is one of git's own files (in .git): git runs hooks and config entries from there with "
        "the user's rights, outside the sandbox, so mm does not change them while the sandbox is on.",
        field="path",
        cls="terminal",
        fix="Tell the user what to change there; a command that changes it is put back too.",
    )


def not_found(ctx: ToolContext, shown: str) -> ToolError:
    """Say which part of *shown* is missing and what exists beside it."""
    chain = [*reversed(Path(shown).parents), Path(shown)]
    missing = next(p for p in chain if not resolve(ctx, str(p)).exists())
    parent = resolve(ctx, str(missing.parent))
    siblings = []
    if parent.is_dir():
        with contextlib.suppress(OSError):  # a folder that cannot be listed suggests nothing
            siblings = sorted(first_names(parent, MAX_SIBLINGS)[:MAX_SIBLINGS])
    maybe = [str(missing.parent / name) for name in closest(missing.name, siblings, n=3)]
    reason = (
        f"{shown} does not exist."
        if missing == Path(shown)
        else f"{shown} does not exist: there is no {missing}."
    )
    fix = f"Did you mean {' or '.join(maybe)}? " if maybe else ""
    return ToolError("not_found", reason, field="path", fix=fix + "Use list_files to see what exists.")


@contextlib.contextmanager
def os_errors(shown: str) -> Iterator[None]:
    """Turn an OS refusal into an answer the model reads."""
    try:
        yield
    except PermissionError:
        raise ToolError("permission_denied", f"Permission denied for {shown}.", cls="terminal") from None
    except OSError as e:
        raise ToolError("os_error", f"{shown}: {e.strerror or e}.", cls="terminal") from None


def is_binary(head: bytes) -> bool:
    if head.find(b"\0") >= 0:  # not `in`, which raises and clears a TypeError first (see models/_http.py)
        return True
    try:  # a multi-byte character cut by the sniff window is not an error
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < SNIFF_BYTES)
    except UnicodeDecodeError:
        return True
    return False


def binary_error(p: Path, shown: str, head: bytes) -> ToolError:
    kind = next((k for magic, k in _MAGIC.items() if head.startswith(magic)), None)
    kind = kind or mimetypes.guess_type(p.name)[0] or "type unknown"
    size = p.stat().st_size
    return ToolError(
        "binary_file",
        f"{shown} is a binary file ({size} bytes, {kind}); only text files can be read.",
        cls="terminal",
    )


def text_file(ctx: ToolContext, p: Path, shown: str) -> bytes:
    """Check that *p* is a readable text file; return its first bytes."""
    if not p.exists():
        raise not_found(ctx, shown)
    if p.is_dir():
        raise ToolError(
            "is_directory",
            f"{shown} is a folder, not a file.",
            field="path",
            fix=f'Use list_files with path "{shown}".',
        )
    with open_regular(p) as f:  # a FIFO or a device there is refused, never waited on
        head = f.read(SNIFF_BYTES)
    if is_binary(head):
        raise binary_error(p, shown, head)
    return head


def numbered(n: int, line: str, chars: int | None = None) -> str:
    """Line *n* as read_file shows it, cut at MAX_LINE characters; *chars*: the line's whole length when
    *line* is only its start (read by :func:`mmd.untrusted.bounded_lines`)."""
    chars = len(line) if chars is None else chars
    if chars > MAX_LINE:
        line = f"{line[:MAX_LINE]} [line cut: {chars} characters]"
    return f"{n:>5}\t{line}"


def atomic_write(path: Path, data: bytes) -> None:
    """Write through a temporary file renamed over *path*: readers see the old or the new file, never half."""
    target = path.resolve() if path.is_symlink() else path
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for a new file
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)  # an overwritten file keeps its mode
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def count_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def display(shown: str, rel: str) -> str:
    """*rel* (relative to the folder the model named as *shown*) as the model would write it."""
    return rel if shown in (".", "./", "") else f"{shown.rstrip('/')}/{rel}"
