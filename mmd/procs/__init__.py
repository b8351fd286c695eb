"""Supervised child processes: every process mmd starts goes through here.

Layers, bottom up:
- ``environ``: what a child gets of the daemon's environment: everything but its
  secrets, unless passed on by name (``pass_env``). The supervisor's one spawn
  function uses it for every child.
- ``output``: no processes, no files opened; turns a child's reads into echo
  text, spill-file bytes, and the bounded head/tail view the model reads.
- ``supervisor``: spawns a child in its own session, records its descendants,
  and stops the whole tree (SIGTERM, grace, SIGKILL, reap, sweep) on exit,
  timeout or cancel; as a subreaper (the daemon) it finds them by the kernel's
  children links instead of scanning /proc. ``run_tool_process`` for one tool call,
  ``supervised_process`` for a long-lived child (``communicate`` feeds and reads it).

The public surface is what this module re-exports.
"""

from mmd.procs.guardian import guard
from mmd.procs.output import NUL_SHOWN, OutputCapture
from mmd.procs.supervisor import (
    TAG_VAR,
    ProcResult,
    become_subreaper,
    communicate,
    reap_orphans,
    run_tool_process,
    set_owner,
    spawn_error_message,
    stop_orphans,
    supervised_process,
    sweep_orphans,
)

__all__ = [
    "NUL_SHOWN",
    "TAG_VAR",
    "OutputCapture",
    "ProcResult",
    "become_subreaper",
    "communicate",
    "guard",
    "reap_orphans",
    "run_tool_process",
    "set_owner",
    "spawn_error_message",
    "stop_orphans",
    "supervised_process",
    "sweep_orphans",
]
