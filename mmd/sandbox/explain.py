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
# A path on such a line: quoted ("touch: cannot touch '/etc/x'"), a word with a slash, or the
# word right before the error's text ("bash: line 1: out.txt: Permission denied").
_PATH = re.compile(
    r"""['"‘`]([^'"’`\n]*/[^'"’`\n]*)['"’`]"""
    r"""|(?<![\w.])((?:~|\.{1,2})?/[^\s:'"]+|[\w.-]+/[^\s:'"]*)"""
    r"""|([^\s:'"]+): (?i:Permission denied|Operation not permitted|Read-only file system)"""
)
# Paths named at most, in the note.
_MAX_PATHS = 5


def refusal_note(output: str, box: Sandbox, cwd: str, agent_file: str | None) -> tuple[str, list[str]] | None:
    """The note to add to a failed confined call's answer, and the refused paths; None if no refusal shows.

    Only lines with a refusal's text are read (and npm's line naming its error's path); a path on them
    that *box* does not allow is named as refused. A refusal with no path outside (a network
    connection, a path the tool did not print) still gets the note, worded as
    "may have". Errors: none.
    """
    every = output.splitlines()
    lines = [line for line in every if _DENIED.search(line)]
    if not lines:
        return None
    refused: list[str] = []
    for line in lines + [line for line in every if _PATH_LINE.search(line)]:
        for quoted, slashed, named in _PATH.findall(line):
            path = os.path.realpath(os.path.join(cwd, os.path.expanduser(quoted or slashed or named)))
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
