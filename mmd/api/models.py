"""The ``models.*`` method: the model names a prompt may give as ``model``, for completion in clients."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ..config import ConfigError, load_user_config
from ..local import catalog as local_catalog
from ..rpc import RPCError
from ..rpc.methods import ModelsList
from ..rpc.results import ModelInfo, ModelsListed

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


async def list_(daemon: Daemon, conn: Connection, p: ModelsList) -> ModelsListed:
    """config.yaml's aliases, then the installed local models, and the default model."""
    # In a worker thread: it parses config.yaml and reads the local models' manifests.
    return await trio.to_thread.run_sync(_listed, daemon)


def _listed(daemon: Daemon) -> ModelsListed:
    try:
        config = load_user_config(daemon.config_path)
    except ConfigError as exc:
        raise RPCError("config_error", str(exc)) from None
    models = [ModelInfo(name=n, provider=a.provider, model=a.model) for n, a in config.models.items()]
    for name in [*local_catalog.MODELS, *local_catalog.added_models()]:
        if local_catalog.model_ready(name):
            models.append(ModelInfo(name=f"local/{name}", provider="local", model=name))
    return ModelsListed(models=models, default_model=config.default_model)


METHODS = {"models.list": (ModelsList, list_)}
