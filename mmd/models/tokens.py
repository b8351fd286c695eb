"""How many tokens a text is, and how large a model's window is: asked of llama-server, else estimated.

llama-server (the one mm runs for ``local/`` models, or any other on this machine) answers
``GET /props`` with the window of its slot (``default_generation_settings.n_ctx``) and
``POST /tokenize {"content": text}`` with the tokens of a text in the model's own vocabulary.
Other servers get an estimate: UTF-8 bytes / 4, rounded up (English prose and code run 3.5–4.5
bytes a token; denser text runs fewer, which the context budget's margins absorb —
docs/local.md#context-budget).

A count never changes for a text of one model, so each counter keeps its counts (:class:`Counter`: 8 MiB
of text at most, dropped when the server names another model); the turn asks again only for messages it has
not seen.
"""

from __future__ import annotations

import logging
import sys
from collections import OrderedDict
from typing import Any
from urllib.parse import urlsplit

import msgspec

from ..untrusted import check_json
from . import transport

log = logging.getLogger("mmd.tokens")

# Bytes per token of the estimate where no tokenizer answers.
ESTIMATE_BYTES = 4
# Bytes per token when llama-server should have answered but did not: dense text's worst case, so
# a missed count never lets an oversized request through.
FALLBACK_BYTES = 2
# Texts whose counts a counter keeps, and their size in all (bytes of the str objects): the least recently
# counted are forgotten past either. One counter serves every session of a model (the estimate's, every
# remote model's), and a text may be as large as an RPC frame (16 MiB): 4,096 of them held 200 MiB of
# prompts that had ended. 8 MiB keeps a few long sessions' histories, whose messages each new turn counts.
CACHE_SIZE = 4096
CACHE_BYTES = 8 * 1024 * 1024
# Seconds for /props and /tokenize: they answer from the HTTP thread, never behind a generation.
TIMEOUT = 10.0
# Hosts whose server may be a llama-server worth asking (never a remote API: it is not asked at all).
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def estimate(text: str, bytes_per_token: int = ESTIMATE_BYTES) -> int:
    """The estimated tokens of *text*: its UTF-8 bytes / *bytes_per_token*, rounded up."""
    return -(-len(text.encode("utf-8", "replace")) // bytes_per_token)


def server_root(base_url: str) -> str:
    """The server's own root of an OpenAI-compatible base URL: ``http://h:p/v1`` → ``http://h:p``."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def on_loopback(url: str) -> bool:
    try:
        return (urlsplit(url).hostname or "").lower() in LOOPBACK
    except ValueError:
        return False


class Counter:
    """Counts tokens by the estimate; keeps each text's count (subclasses count otherwise)."""

    exact = False  # the model's own tokenizer, or an estimate

    def __init__(self) -> None:
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._bytes = 0  # of the texts kept (sys.getsizeof)
        self.serves: Any = None  # what the counts are of (LlamaCounter: the server's model)

    async def count(self, text: str) -> int:
        """The tokens of *text*, counted once per text."""
        if not text:
            return 0
        if (known := self._counts.get(text)) is not None:
            self._counts.move_to_end(text)
            return known
        counted = await self._count(text)
        if counted is None:
            return estimate(text, FALLBACK_BYTES)  # not kept: asked again next time
        size = sys.getsizeof(text)
        if size <= CACHE_BYTES and text not in self._counts:  # one larger is counted again next turn
            self._counts[text] = counted
            self._bytes += size
            while len(self._counts) > CACHE_SIZE or self._bytes > CACHE_BYTES:
                self._bytes -= sys.getsizeof(self._counts.popitem(last=False)[0])
        return counted

    def serving(self, what: Any) -> None:
        """The counts to come are of *what* (a llama-server's model): when it is not what they were of, the
        kept counts go, since another tokenizer counts the same text otherwise."""
        if what != self.serves:
            self._counts.clear()
            self._bytes = 0
            self.serves = what

    async def _count(self, text: str) -> int | None:
        return estimate(text)

    async def aclose(self) -> None:
        pass


class LlamaCounter(Counter):
    """Counts with llama-server's ``/tokenize`` at *root* (``http://127.0.0.1:PORT``)."""

    exact = True

    def __init__(self, root: str, key: str | None = None) -> None:
        super().__init__()
        self.root = root
        self.key = key  # the API key of a llama-server mm runs
        self._http = transport.client_for(root, TIMEOUT)

    async def _count(self, text: str) -> int | None:
        url = f"{self.root}/tokenize"
        try:
            status, data = await transport.fetch(
                self._http, "POST", url, msgspec.json.encode({"content": text}), key=self.key
            )
            if status != 200:
                raise ValueError(f"HTTP {status}")
            check_json(data, what="the answer is")  # a ValueError before the decoder recurses
            tokens = msgspec.json.decode(data).get("tokens")
        except (transport.TransportError, ValueError, AttributeError) as exc:
            log.warning("could not count tokens at %s: %s", url, exc)
            return None
        return len(tokens) if isinstance(tokens, list) else None

    async def aclose(self) -> None:
        await self._http.aclose()


class Props(msgspec.Struct, frozen=True):
    """What a server at a root said to ``GET /props``."""

    window: int | None  # its slot's n_ctx; None: it is no llama-server
    answered: bool  # False: nothing listens, or the connection broke (it may be one once it is up)
    # Which model it serves (its file and window): a server restarted with another model on the same port
    # tokenizes otherwise, so the counts kept of the one before must go (Counter.serving).
    model: tuple[str | None, int] | None = None


async def llama_window(root: str) -> int | None:
    """The window (``n_ctx``) of the llama-server at *root*, or None when it is no llama-server."""
    return (await server_props(root)).window


async def server_window(root: str) -> tuple[int | None, bool]:
    """The window of the llama-server at *root* (None: it is none), and whether a server answered at all."""
    props = await server_props(root)
    return props.window, props.answered


async def server_props(root: str, key: str | None = None) -> Props:
    """What the llama-server at *root* says of its window and model (:class:`Props`); *key*: its API key."""
    http = transport.client_for(root, TIMEOUT)
    try:
        status, data = await transport.fetch(http, "GET", f"{root}/props", key=key)
        if status != 200:
            return Props(None, True)
        check_json(data, what="the answer is")  # a ValueError before the decoder recurses
        props: Any = msgspec.json.decode(data)
        n_ctx = props["default_generation_settings"]["n_ctx"]
        path = props.get("model_path")
    except transport.TransportError:
        return Props(None, False)
    except (ValueError, KeyError, TypeError, AttributeError):
        return Props(None, True)
    finally:
        await http.aclose()
    if not isinstance(n_ctx, int) or n_ctx <= 0:
        return Props(None, True)
    return Props(n_ctx, True, (path if isinstance(path, str) else None, n_ctx))
