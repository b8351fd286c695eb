"""The variables of the daemon's environment that hold the configuration's secrets: withheld from every child.

Apart from the file Structs because it asks :func:`mmd.procs.environ.looks_secret`,
and importing mmd.procs loads the supervisor (trio, psutil), which reading an
agent file or config.yaml does not need.
"""

from __future__ import annotations

from ..procs.environ import looks_secret
from .mcp import McpServerSpec, references
from .user import UserConfig


def secret_variables(config: UserConfig) -> set[str]:
    """The variables of the daemon's environment that hold this config's secrets.

    Each provider's ``api_key_env`` and the credentials of its MCP servers
    (:func:`credential_variables`): no child of the daemon gets
    them unless an agent's ``pass_env`` names them.

    Errors: none.
    """
    names = {p.api_key_env for p in config.providers.values() if p.api_key_env}
    return names | credential_variables(config.mcp)


def credential_variables(servers: dict[str, McpServerSpec]) -> set[str]:
    """The variables that carry credentials to *servers*: withheld from every other child.

    Every ``${VAR}`` of a header (headers exist to authenticate), and every one
    of an ``env:`` entry whose key or variable looks like a secret
    (``GITHUB_PERSONAL_ACCESS_TOKEN: ${GH_PAT}``); ``PATH: ${PATH}:/opt`` is not one.

    Errors: none.
    """
    names: set[str] = set()
    for spec in servers.values():
        for value in spec.headers.values():
            names.update(m[1] for m in references(value))
        for key, value in spec.env.items():
            refs = [m[1] for m in references(value)]
            names.update(r for r in refs if looks_secret(key) or looks_secret(r))
    return names
