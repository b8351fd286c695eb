"""Values that count the work done on them, so a test can show a reader's work is linear without timing it."""

from __future__ import annotations

from typing import Any


class Counted(str):
    """A text that counts, in ``built``, the characters of each string made from it by + or lstrip."""

    built = 0

    def __add__(self, other: str) -> Counted:
        Counted.built += len(self) + len(other)
        return Counted(str.__add__(self, other))

    def __radd__(self, other: str) -> Counted:
        Counted.built += len(other) + len(self)
        return Counted(str.__add__(other, self))

    def lstrip(self, chars: str | None = None) -> Counted:
        Counted.built += len(self)
        return Counted(str.lstrip(self, chars))


class CountingBuffer(bytearray):
    """A buffer that counts, in ``searched``, the bytes its searches (find) look at."""

    searched = 0

    def find(self, sub: Any, start: int = 0, *args: Any) -> int:
        found = super().find(sub, start, *args)
        self.searched += (found + len(sub) if found >= 0 else len(self)) - start
        return found
