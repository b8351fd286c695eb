"""``sandbox:`` in the agent file and in an MCP server's entry: a mode, or a map with writable folders and network.

```yaml
sandbox: workspace                # read-only | workspace | off
sandbox:                          # or the map
  mode: workspace
  writable: [../shared, ~/.cache/pip]
  network: off
```

The short form is turned into the map before the file's values are checked
(:func:`normalise`), so errors name ``sandbox`` or ``sandbox.mode`` with
their line like every other key. YAML reads a bare ``off`` as false: both
are accepted for ``off``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from .loader import Document, FieldPath, describe, did_you_mean

SandboxMode = Literal["workspace", "read-only", "off"]
MODES: tuple[str, ...] = ("workspace", "read-only", "off")
_EXPECTED = '"workspace", "read-only" or "off" (or a map with mode:, writable:, network:)'


class SandboxSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    # None: the default of where it is written (workspace for an agent, off for an MCP server).
    mode: Annotated[SandboxMode | None, msgspec.Meta(description='"workspace", "read-only" or "off"')] = None
    # Folders processes may write besides the session's directory and the temp dir; absolute once loaded.
    writable: list[Annotated[str, msgspec.Meta(description="a path to a folder")]] = []
    # false (YAML's off): no TCP for the processes (Landlock's network rules).
    network: Annotated[bool, msgspec.Meta(description="on or off")] = True


def normalise(doc: Document, path: FieldPath) -> None:
    """Turn the short form at *path* of *doc* (``sandbox: workspace``, ``sandbox: off``) into the map.

    Errors: ConfigError for a string that is no mode (with a did-you-mean) or ``true``.
    """
    parent = _at(doc.data, path[:-1])
    if not isinstance(parent, dict) or path[-1] not in parent:
        return
    value = parent[path[-1]]
    if value is False:
        value = "off"
    if isinstance(value, str):
        if value not in MODES:
            raise doc.error(path, expected=_EXPECTED, found=describe(value), hint=did_you_mean(value, MODES))
        parent[path[-1]] = {"mode": value}
        line = doc.line(path)
        if line is not None:
            doc.lines[(*path, "mode")] = line
    elif value is True:
        raise doc.error(path, expected=_EXPECTED, found=describe(value))
    elif isinstance(value, dict) and value.get("mode") is False:
        value["mode"] = "off"


def absolute(spec: SandboxSpec, base_dir: Path) -> SandboxSpec:
    """*spec* with its ``writable:`` folders absolute: from *base_dir*, ``~`` expanded."""
    writable = [os.path.normpath(base_dir / Path(p).expanduser()) for p in spec.writable]
    return msgspec.structs.replace(spec, writable=writable)


def _at(data: Any, path: FieldPath) -> Any:
    for key in path:
        if not isinstance(data, dict | list):
            return None
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data
