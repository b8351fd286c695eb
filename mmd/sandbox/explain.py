"""What the model reads when the sandbox refused something a confined process tried.

The kernel answers a refused write with EACCES ("Permission denied"), a link
into another folder with EXDEV ("Invalid cross-device link") and a refused TCP
connection with EACCES too; the process prints that in its own words and
fails. :func:`refusal_note` reads a failed confined process's output for those
texts and the paths beside them, and says which the sandbox refused and how a
person can allow them: the model then knows not to retry, and what to tell the
user, instead of reading a bare "Permission denied".
"""

from __future__ import annotations

import os
import re

from . import Sandbox

# The kernel's texts for the errors a refusal gives, as libc, Python, Go (lower case), Rust ("os error 13") and
# Node (the errno's name: npm prints "code EACCES" and its own advice, `sudo chown -R`, which a model would
# follow) print them.
_DENIED = re.compile(
    r"(?i:permission denied|operation not permitted|invalid cross-device link|read-only file system)"
    r"|\[Errno (?:1|13|18|30)\]|\(os error (?:1|13|18|30)\)|\bE(?:ACCES|PERM|XDEV|ROFS)\b",
)
# npm names the path of its error on a line of its own ("npm error path /root/.npm/_cacache/…").
_DENIED_NET = re.compile(r"Errno 13|(?i:permission denied)|\bEACCES\b")  # what a refused connect prints
_PATH_LINE = re.compile(r"^npm (?:error|ERR!) path ")
# A path on such a line: quoted ("touch: cannot touch '/etc/x'"), a word with a slash, or the word right
# before the error's text ("bash: line 1: out.txt: Permission denied"). Each is found in time linear in the
# line: the output is a command's, shaped as it likes (one pattern of three alternatives took 3.7 s of the
# event loop on a 24 KB line of "-a." once).
_QUOTED = re.compile(r"""['"‘`]([^'"‘’`\n]*)['"’`]""")  # no quote inside: an opening one ends the scan
_WORD = re.compile(r"""[^\s:'"‘’`]+""")
_LEADING = re.compile(r"[^\w.~/-]*")  # what precedes a path in its word: "(/tmp/x" names /tmp/x
_NAMED = re.compile(r": (?i:Permission denied|Operation not permitted|Read-only file system)")
_SEPARATORS = frozenset(" \t:'\"‘’`")
# Lines read and paths resolved (each on the file system) at most, for one note.
_MAX_LINES, _MAX_CANDIDATES = 64, 64
# Paths named at most, in the note.
_MAX_PATHS = 5


def refusal_note(output: str, box: Sandbox, cwd: str, agent_file: str | None) -> tuple[str, list[str]] | None:
    """The note to add to a failed confined call's answer, and the refused paths; None if no refusal shows.

    Only lines with a refusal's text are read (and npm's line naming its error's path; 64 lines at most);
    a path on them (64 at most) that *box* does not allow is named as refused. A refusal with no path outside (a network
    connection, a path the tool did not print) still gets the note, worded as
    "may have". Errors: none.
    """
    every = output.splitlines()
    lines = [line for line in every if _DENIED.search(line)]
    if not lines:
        return None
    refused: list[str] = []
    named = [
        found
        for line in [*lines, *(x for x in every if _PATH_LINE.search(x))][:_MAX_LINES]
        for found in _paths_in(line)
    ]
    for found in list(dict.fromkeys(named))[:_MAX_CANDIDATES]:
        path = os.path.realpath(os.path.join(cwd, os.path.expanduser(found)))
        if not box.allows(path) and path not in refused:
            refused.append(path)
    here = agent_file or "the agent file (mm.yaml)"
    allow = (
        f"A person can allow a folder by adding it to sandbox.writable: in {here} (this project) or in "
        f"{box.config_file()} "
        "(every project: a tool's cache such as ~/.cache/uv), or run mm with --sandbox off."
    )
    if refused:
        shown = ", ".join(refused[:_MAX_PATHS]) + (" …" if len(refused) > _MAX_PATHS else "")
        head = f"[mm: the sandbox refused writing {shown}: {box.summary()}."
    elif not box.network and any(_DENIED_NET.search(line) for line in lines):
        head = f"[mm: the sandbox may have refused this ({box.summary()})."
        allow = "A person can allow network access by removing sandbox.network: off, or run mm with --sandbox off."
    else:
        head = f"[mm: the sandbox may have refused this: {box.summary()}."
    return f"{head} Do not retry it; tell the user. {allow}]", refused


def _paths_in(line: str) -> list[str]:
    """The paths *line* names, left to right: quoted texts with a slash, words with a slash outside them
    (what precedes the path in its word left out), and the word right before a refusal's text."""
    found: list[tuple[int, str]] = []
    quoted: list[tuple[int, int]] = []
    for m in _QUOTED.finditer(line):
        if "/" in m.group(1):
            found.append((m.start(), m.group(1)))
            quoted.append(m.span())
    k = 0
    for m in _WORD.finditer(line):
        while k < len(quoted) and quoted[k][1] <= m.start():
            k += 1
        if "/" in m.group() and not (k < len(quoted) and quoted[k][0] <= m.start()):
            word = m.group()
            found.append((m.start(), word[_LEADING.match(word).end() :]))  # type: ignore[union-attr]
    for m in _NAMED.finditer(line):
        start = m.start()
        while start > 0 and line[start - 1] not in _SEPARATORS:  # each character looked at once: the
            start -= 1  # refusals' texts do not overlap
        if start < m.start():
            found.append((start, line[start : m.start()]))
    return [path for _, path in sorted(found) if path]
