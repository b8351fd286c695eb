"""Model providers, in one table: config.yaml's ``kind:`` names a provider class of this package.

``PROVIDERS`` maps each kind to its class as ``"module:Class"`` under this
package. Adding a provider takes its module and one line here: config.yaml's
``providers.<name>.kind`` accepts the kinds of ``PROVIDER_KINDS``, and
``ModelRef.build`` (factory.py) makes the class with the same keyword
arguments for every kind (name, base_url, model, api_key, timeout,
max_retries, headers, and max_tokens when the user set one).

The classes are imported when a provider is first built, not with this
package: the config loader reads the kinds from here and stays light.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Provider

PROVIDERS: dict[str, str] = {
    "openai": "openai:OpenAIProvider",  # /chat/completions: OpenAI, llama-server, vLLM, Ollama, gateways
    "anthropic": "anthropic:AnthropicProvider",  # /v1/messages
}
PROVIDER_KINDS: tuple[str, ...] = tuple(PROVIDERS)


@functools.cache  # the module is imported on first use; import_module again cost ~7 Python calls a provider a prompt
def provider_class(kind: str) -> type[Provider]:
    """The Provider class of *kind* (a key of PROVIDERS)."""
    module, _, cls = PROVIDERS[kind].partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)
