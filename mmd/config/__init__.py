"""mm's configuration: the agent file and the user's config.yaml, as msgspec Structs.

``loader`` turns YAML into Structs and every problem into a ConfigError that
names the file, line and field; ``agent`` and ``user`` declare the two file
types and where they are found. Both are read afresh for every prompt.
"""

from .agent import AgentFile, find_agent_file, load_agent_file
from .loader import ConfigError
from .user import DaemonConfig, ModelAlias, ProviderConfig, UserConfig, load_user_config, resolve_model

__all__ = [
    "AgentFile",
    "ConfigError",
    "DaemonConfig",
    "ModelAlias",
    "ProviderConfig",
    "UserConfig",
    "find_agent_file",
    "load_agent_file",
    "load_user_config",
    "resolve_model",
]
