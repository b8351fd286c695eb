"""The ``mm`` console script: answers ``mm --version`` at once, hands everything else to :mod:`mm.cli`.

For a prompt (``-p``) with no daemon running, the daemon is started first, so that its start-up
overlaps the client's own imports.

Importing click and the client's modules costs more than the interpreter's own start, and
``mm --version`` needs none of it: a script that checks what is installed (editors, CI) pays
only for Python itself. The text is click's ``version_option`` text, word for word.
"""

from __future__ import annotations

import sys

from mmd import __version__  # mmd/__init__.py imports nothing but sys

VERSION_FLAGS = ("-V", "--version")
# Words that make this run a prompt for the model, which needs the daemon (`mm -p`, as scripts use it).
PROMPT_FLAGS = ("-p", "--print")


def main() -> int:
    """Run ``mm`` with ``sys.argv``; the exit status."""
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
