"""The ``mm`` console script: answers ``mm --version`` at once, hands everything else to :mod:`mm.cli`.

For a prompt (``-p``) with no daemon running, the daemon is started first, so that its start-up
overlaps the client's own imports.

Importing click and the client's modules costs more than the interpreter's own start, and
``mm --version`` needs none of it: a script that checks what is installed (editors, CI) pays
only for Python itself. The text is click's ``version_option`` text, word for word.
"""

from __future__ import annotations

import io
import os
import sys

from mmd import __version__  # mmd/__init__.py imports nothing but sys

VERSION_FLAGS = ("-V", "--version")
# Words that make this run a prompt for the model, which needs the daemon (`mm -p`, as scripts use it).
PROMPT_FLAGS = ("-p", "--print")


def standard_streams() -> None:
    """Make stdin, stdout and stderr usable whatever mm was started with.

    A closed one (``mm -p ... <&-``, a launcher that closes them) is None in ``sys``: the first write or
    ``isatty`` was an AttributeError, and the first file or socket mm opened took its descriptor. It
    becomes /dev/null. Text the locale's encoding cannot write (an answer's ✓ under a Latin-1 or ASCII
    locale) is written as its escape (``\\u2713``), as Python writes it to stderr, not a UnicodeEncodeError
    once the turn is over."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        stream = getattr(sys, name)
        if stream is None:
            null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
            try:
                os.fstat(fd)
            except OSError:  # still free: /dev/null takes it
                os.dup2(null, fd)
                os.close(null)
                null = fd
            stream = open(null, mode, encoding="utf-8", closefd=null != fd)  # noqa: SIM115  (kept open: it is sys.stdout)
            setattr(sys, name, stream)
        if mode == "w" and isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def main() -> int:
    """Run ``mm`` with ``sys.argv``; the exit status."""
    standard_streams()
    if len(sys.argv) == 2 and sys.argv[1] in VERSION_FLAGS:
        sys.stdout.write(f"mm, version {__version__}\n")
        return 0
    if any(word in PROMPT_FLAGS for word in sys.argv[1:]):
        # Start the daemon if none runs before importing the rest of the client, so that the
        # two start-ups overlap (a cold `mm -p` waited for both, one after the other).
        from . import spawn

        spawn.prestart()
    from .cli import main as cli
    from .spawn import DaemonError

    try:
        return cli()
    except (
        DaemonError
    ) as exc:  # the daemon went away or broke a call any command made: a message, not a traceback
        from . import terminal

        terminal.echo(f"mm: {exc}", err=True)
        return 1
