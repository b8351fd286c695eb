"""Checkpoints of the working tree around each write step, in a shadow git repository per project.

``shadow`` runs git on the private repository (snapshots, diffs, restores); ``steps`` records a turn's
steps and answers ``session.diff`` and ``session.undo``. docs/undo.md says what is captured and what
is not.
"""

from . import watch
from .shadow import EMPTY_TREE, Change, Shadow, SnapshotError, shadow_dir
from .steps import Recorder, UndoError, diff, remove_unused, undo

__all__ = [
    "EMPTY_TREE",
    "Change",
    "Recorder",
    "Shadow",
    "SnapshotError",
    "UndoError",
    "diff",
    "remove_unused",
    "shadow_dir",
    "undo",
    "watch",
]
