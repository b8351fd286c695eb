"""``loop:`` and ``phases:`` of the agent file: how a turn watches for loops and exposes tools.

``loop:`` sets the loop detector's thresholds (mmd.turn.loops); ``phases:``
splits the tools into phases, only the current one's offered to the model
(mmd.turn.phases). See docs/loops-and-recovery.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

if TYPE_CHECKING:
    from .loader import Document

# A phase name: what the next_phase tool's description and the events show.
_PHASE_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"


class LoopLimits(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    enabled: bool = True
    # The same tool with the same arguments this many times in a turn.
    repeat: Annotated[int, msgspec.Meta(ge=2)] = 3
    # The same call failing with the same error this many times in a row.
    same_error: Annotated[int, msgspec.Meta(ge=2)] = 2
    # An A-B-A-B (or A-B-C-A-B-C) cycle seen this many times in a row.
    cycle: Annotated[int, msgspec.Meta(ge=2)] = 2


class PhaseSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    name: Annotated[str, msgspec.Meta(pattern=_PHASE_NAME, description="a phase name like plan or act")]
    # Tool names offered in this phase; shell-style globs allowed ("git_*").
    tools: Annotated[
        list[str],
        msgspec.Meta(min_length=1, description="a list of tool names or globs, like [read_file, grep]"),
    ]
    # Moving INTO this phase asks the user (next_phase is a write tool); false: the model moves freely.
    requires_consent: bool = True
    description: str | None = None  # what this phase is for, shown in next_phase's description


def check_phases(doc: Document, phases: list[PhaseSpec]) -> None:
    """Phase names are unique.

    Errors: ConfigError naming the second phase of a name.
    """
    seen: set[str] = set()
    for index, phase in enumerate(phases):
        if phase.name in seen:
            raise doc.error(
                ("phases", index, "name"),
                problem=f'a second phase named "{phase.name}"',
                hint="give each phase its own name",
            )
        seen.add(phase.name)
