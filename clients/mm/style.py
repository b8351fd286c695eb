"""Colour, or none: mm colours only a terminal, and never under ``NO_COLOR`` or ``--no-color``.

``NO_COLOR`` follows https://no-color.org: any non-empty value turns colour off (an empty one
does not). ``--no-color`` does the same for one command. click's own styling (``click.style``
in ``mm sessions show``) follows the context's ``color``, which the option's callback sets.
"""

from __future__ import annotations

import os
from typing import Any, TextIO

import click

from .terminal import is_terminal

# Set by --no-color for the rest of this process.
_off = False


def disable() -> None:
    """No colour from here on in this process (what ``--no-color`` does)."""
    global _off
    _off = True


def enabled(stream: TextIO) -> bool:
    """Whether text written to *stream* may be coloured: a terminal, no NO_COLOR, no --no-color."""
    return not (_off or os.environ.get("NO_COLOR")) and is_terminal(stream)


def _option_seen(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    # Runs for every command line, given or not: NO_COLOR alone must silence click's styling too.
    if value:
        disable()
    if value or os.environ.get("NO_COLOR"):
        ctx.color = False


def no_color_option(command: Any) -> Any:
    """The ``--no-color`` option, as a decorator of a click command or group."""
    return click.option(
        "--no-color",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_option_seen,
        help="No colour in anything mm prints (as NO_COLOR=1 does).",
    )(command)
