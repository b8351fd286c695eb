"""Options several commands share, as decorators of click commands."""

from __future__ import annotations

import click

# The modes of the sandbox of a turn's processes (docs/security.md#sandbox); mmd.sandbox.MODES.
SANDBOX_MODES = ("workspace", "read-only", "off")

sandbox_option = click.option(
    "--sandbox",
    type=click.Choice(SANDBOX_MODES),
    help="What the turn's processes may write: the project and the temp dir (workspace, the default), "
    "the temp dir only (read-only), or anything (off).",
)
