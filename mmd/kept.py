"""What the daemon keeps between prompts to spare work, bounded: the entries used last, by their number and
by what they weigh.

Every prompt reads its files again (config.yaml, agent files, MCP JSON files, each SKILL.md), and parsing them
again was most of a prompt's CPU; so what a text gave is kept by the whole text. The text is the key, so an
edit is always seen, and the texts come from anywhere: a cloned repository's files included. Each entry
weighs its key's strings and a fixed overhead (weighed by its text alone, an empty file weighed nothing and
its entries were never let go: 20,000 empty mm.yaml kept ~37 MiB), and their number is capped too. The
rendered tool specs (tools/registry.py) and MCP schema checks (mcp/schema.py) are kept the same way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Kept(Generic[K, V]):
    """A map of at most *entries* entries weighing *weight* together, the least recently used let go first.
    Each entry weighs ``weigh(key)``, or what :meth:`put` is told (a weight the key cannot tell: a schema's
    text kept by its digest). Thread-safe: files are read in worker threads, several prompts at once.
    *entries* and *weight* may be changed on the instance; the next entry kept follows them."""

    def __init__(self, entries: int, weight: int, weigh: Callable[[K], int] | None = None) -> None:
        self.entries, self.weight = entries, weight
        self._weigh = weigh
        self._map: OrderedDict[K, tuple[V, int]] = OrderedDict()  # each value with its weight
        self._held = 0  # what the entries weigh together: added up as they come and go, not at each one
        self._lock = threading.Lock()

    def get(self, key: K, default: Any = None) -> Any:
        """The value kept for *key* (now the most recently used), or *default*."""
        with self._lock:
            found = self._map.get(key)
            if found is None:
                return default
            self._map.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V, weight: int | None = None) -> None:
        """Keep *value* for *key*, the most recently used, weighing *weight* (else ``weigh(key)``); past the
        bounds, the least recently used go."""
        if weight is None:
            assert self._weigh is not None, "a Kept made without weigh is told each entry's weight"
            weight = self._weigh(key)
        with self._lock:
            old = self._map.pop(key, None)  # another prompt's thread may have kept the same key meanwhile
            self._held += weight - (old[1] if old is not None else 0)
            self._map[key] = (value, weight)
            while self._map and (self._held > self.weight or len(self._map) > self.entries):
                self._held -= self._map.popitem(last=False)[1][1]

    @property
    def held(self) -> int:
        """What the entries kept weigh together."""
        return self._held

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[K]:
        with self._lock:
            return iter(list(self._map))
