"""Regular expressions mm did not write, compiled within limits and matched by a deadline.

A declared tool's parameter ``pattern`` (a cloned repository's agent file), a
Claude-shape hook ``matcher`` (config.yaml, a repository's .claude/settings.json),
the model's grep pattern and list_files glob: each is hostile input. Python's
``re`` backtracks without bound and holds the GIL while it does, so one match of
``^(a|a)+$`` against forty a's and a ``!`` stops the whole daemon for good (not
even SIGTERM gets through). Every such pattern is compiled by :func:`compile` and
matched through its :class:`Pattern`, which runs on the ``regex`` package:

- the syntax is ``re``'s: a pattern is parsed by ``re``'s own parser first, so
  what ``re`` refuses is refused with ``re``'s message (an ``re.error``), and
  the two places where ``regex`` reads an ``re`` pattern differently (a ``{``
  that ``re`` takes literally, ``[:`` inside a class) are escaped first;
- compiling is bounded: ``regex`` unrolls counted repeats when it compiles
  (``(?:a{1000}){1000}`` builds a million items, each nested ``+`` doubles the
  pattern), so a pattern longer than MAX_PATTERN_CHARS, with groups nested
  deeper than MAX_PATTERN_DEPTH, or whose repeats would unroll past
  MAX_PATTERN_WEIGHT items is refused (:class:`TooComplex`, an ``re.error``);
- matching is bounded: each match runs with ``regex``'s ``timeout`` against a
  :class:`Deadline` shared by one whole check (all the patterns of one call's
  arguments, one path of a listing), and with the GIL released, so the event
  loop and the other threads go on meanwhile. A match past its deadline
  raises :class:`TooSlow`; the caller says so (docs/security.md).

Compiled patterns are kept in a small cache bounded by their total weight.

Globs mm did not write go through :func:`fnmatch`: ``fnmatch``'s regexes match
in linear time (atomic groups), but its translation takes time in the square of
the number of ``[`` that no ``]`` follows, and a glob of half a megabyte of them
would hold the GIL for hours.
"""

from __future__ import annotations

import fnmatch as _fnmatch
import re
import threading
import time
from collections import OrderedDict
from re import _parser  # type: ignore[attr-defined]  # re's own parser: the syntax mm promises
from typing import Any

# Seconds one check may spend matching: the patterns of one call's arguments (run on the event
# loop), one hook's matcher, one path of a listing, one line of a grep. A real pattern takes
# microseconds; one that backtracks past this would take years.
SECONDS = 0.2
# Longest pattern compiled: re's parser and regex's compiler take time in proportion to it
# (a 10,000-character pattern compiles in about 20 ms). Real ones are under a hundred.
MAX_PATTERN_CHARS = 10_000
# Runs of a match that regex stopped by the clock before it had the CPU its deadline allows (Pattern._run).
RETRIES = 4
# Deepest nesting of groups: both parsers recurse once per level (regex hits Python's recursion
# limit near 300). Real patterns nest two or three.
MAX_PATTERN_DEPTH = 32
# Most items a pattern may unroll into when regex compiles it: each repeat counts its body once
# more than its minimum count. 10,000 items take about 10 MiB and 10 ms to compile.
MAX_PATTERN_WEIGHT = 10_000
# The compiled patterns kept: at most this many, and at most this total weight.
_CACHE_ENTRIES = 256
_CACHE_WEIGHT = 50_000

# re's flags that a caller may give, and regex's value of each (regex.ASCII is not re.ASCII).
_FLAG_NAMES = {re.IGNORECASE: "IGNORECASE", re.MULTILINE: "MULTILINE", re.DOTALL: "DOTALL", re.ASCII: "ASCII"}
_REPEATS = (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT)
# A "{" that re reads as a quantifier: {m}, {m,}, {,n}, {m,n} ({} is literal).
_QUANTIFIER = re.compile(r"\{(?!\})\d*(?:,\d*)?\}")


class TooComplex(re.error):
    """A pattern refused before it is compiled: too long, nested too deep, or repeats that unroll too far."""


class TooSlow(Exception):
    """A match that reached its deadline: the pattern backtracks too much on this text."""

    def __init__(self, pattern: str, seconds: float) -> None:
        self.pattern = pattern
        self.seconds = seconds
        super().__init__(f"matching the pattern {pattern} took longer than {seconds:g} s")


class Deadline:
    """When the matches of one check must end: *seconds* (SECONDS) from now.

    The default check's seconds are the calling thread's CPU time, not the clock's: a pattern that backtracks
    spends them, a loaded machine does not. Counted by the clock, a hook's ``Edit|Write`` missed ``Write``
    on a busy CI machine (0.2 s passed while the thread waited for a core, or imported ``regex``), and a
    guard hook was skipped. A deadline given its *seconds* (a listing's, the tool's timeout) is the clock's.
    """

    __slots__ = ("_now", "at", "seconds")

    def __init__(self, seconds: float | None = None) -> None:
        self._now = time.thread_time if seconds is None else time.monotonic
        self.seconds = SECONDS if seconds is None else seconds
        self.at = self._now() + self.seconds

    def left(self) -> float:
        return self.at - self._now()

    def spend(self) -> None:
        """A match ran out of it: nothing is left for the check's next matches."""
        self.at = self._now()


class Pattern:
    """A compiled untrusted pattern; each match returns whether it matched, or raises TooSlow.

    A match ends by *deadline*, and, with *each*, within *each* seconds of its start too: a
    listing gives each path SECONDS and the whole walk the tool's timeout.
    """

    __slots__ = ("_regex", "pattern", "weight")

    def __init__(self, pattern: str, compiled: Any, weight: int) -> None:
        self.pattern = pattern
        self.weight = weight
        self._regex = compiled

    def search(self, text: str, deadline: Deadline, *, each: float | None = None) -> bool:
        return self._run(self._regex.search, text, deadline, each)

    def match(self, text: str, deadline: Deadline, *, each: float | None = None) -> bool:
        return self._run(self._regex.match, text, deadline, each)

    def fullmatch(self, text: str, deadline: Deadline, *, each: float | None = None) -> bool:
        return self._run(self._regex.fullmatch, text, deadline, each)

    def _run(self, method: Any, text: str, deadline: Deadline, each: float | None) -> bool:
        # regex's timeout is the clock's: a match it stopped before this thread spent the CPU the deadline
        # allows stopped because the machine was busy, and runs again (RETRIES times at most).
        for _ in range(RETRIES + 1):
            left = deadline.left()
            if left <= 0:  # regex reads a timeout below 0 as none at all
                raise TooSlow(self.pattern, deadline.seconds)
            timeout, seconds = (each, each) if each is not None and each < left else (left, deadline.seconds)
            spent = time.thread_time()
            try:
                return method(text, timeout=timeout, concurrent=True) is not None  # concurrent: GIL released
            except TimeoutError:
                if time.thread_time() - spent >= timeout / 2:  # it had the CPU: the pattern backtracks
                    if seconds == deadline.seconds:
                        # Stopped with CPU time left on a loaded machine (the timeout is the clock's): still
                        # too slow for the whole check, however easy its next matches.
                        deadline.spend()
                    raise TooSlow(self.pattern, seconds) from None
        if seconds == deadline.seconds:
            deadline.spend()
        raise TooSlow(self.pattern, seconds)


_cache: OrderedDict[tuple[str, int], Pattern] = OrderedDict()
_cache_weight = 0
_cache_lock = threading.Lock()


def compile(pattern: str, flags: int = 0) -> Pattern:
    """*pattern* with re's syntax and meaning, ready to match by a deadline; cached.

    *flags*: re.IGNORECASE, re.MULTILINE, re.DOTALL, re.ASCII.

    Errors: re.error for a pattern re refuses (re's message and position);
    TooComplex (an re.error) for one past MAX_PATTERN_CHARS, MAX_PATTERN_DEPTH or MAX_PATTERN_WEIGHT.
    """
    key = (pattern, flags)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    compiled = _compile(pattern, flags)
    _remember(key, compiled)
    return compiled


def _compile(pattern: str, flags: int) -> Pattern:
    import regex  # on first use: 2 MiB and 15 ms that an agent with no such pattern never pays

    if flags & ~sum(_FLAG_NAMES):
        raise ValueError(f"flags {flags:#x}: only re.IGNORECASE, re.MULTILINE, re.DOTALL and re.ASCII")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise TooComplex(f"too long: {len(pattern):,} characters; the limit is {MAX_PATTERN_CHARS:,}")
    depth = nesting(pattern)
    if depth > MAX_PATTERN_DEPTH:
        raise TooComplex(f"too complex: groups nested {depth} deep; the limit is {MAX_PATTERN_DEPTH}")
    parsed = _parser.parse(pattern, flags)  # re.error as re.compile would raise it
    weight = _weight(parsed)
    if weight > MAX_PATTERN_WEIGHT:
        raise TooComplex(
            f"too complex: compiled, it would unroll into more than {MAX_PATTERN_WEIGHT:,} items (a repeat "
            f"copies what it repeats as often as its least count, {{1000}} or + inside another multiply); "
            f"the limit is {MAX_PATTERN_WEIGHT:,}"
        )
    verbose = bool(parsed.state.flags & re.VERBOSE)
    options = regex.V0 | sum(getattr(regex, name) for bit, name in _FLAG_NAMES.items() if flags & bit)
    try:
        compiled = regex.compile(pattern if verbose else as_re_reads(pattern), options, cache_pattern=False)
    except regex.error as exc:  # the few patterns re takes and regex does not
        raise re.error(str(exc)) from None
    return Pattern(pattern, compiled, weight)


def _remember(key: tuple[str, int], compiled: Pattern) -> None:
    global _cache_weight
    with _cache_lock:
        if key in _cache:
            return
        _cache[key] = compiled
        _cache_weight += compiled.weight
        while len(_cache) > _CACHE_ENTRIES or (_cache_weight > _CACHE_WEIGHT and len(_cache) > 1):
            _, dropped = _cache.popitem(last=False)
            _cache_weight -= dropped.weight


def nesting(pattern: str) -> int:
    """How deep the groups of *pattern* nest, counting every unescaped ``(`` (one in a class too).

    Errors: none.
    """
    depth = deepest = 0
    escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(0, depth - 1)
    return deepest


def fnmatch(name: str, glob: str) -> bool:
    """``fnmatch.fnmatchcase(name, glob)`` for a glob mm did not write, in time linear in the glob.

    A glob longer than MAX_PATTERN_CHARS matches nothing (its translation and compilation alone would
    take seconds). A ``[`` that opens no class is a literal ``[`` to fnmatch, found by a scan to the end
    of the glob each time; it is given as ``[[]``, the same literal found at once (:func:`_closed`).

    Errors: none.
    """
    return len(glob) <= MAX_PATTERN_CHARS and _fnmatch.fnmatchcase(name, _closed(glob))


def _closed(glob: str) -> str:
    """*glob* with each ``[`` that fnmatch reads as a literal written ``[[]``, in one pass."""
    out: list[str] = []
    i, n = 0, len(glob)
    none_from = n  # no "]" at or after this index
    while i < n:
        if glob[i] != "[":
            out.append(glob[i])
            i += 1
            continue
        j = i + 1 + (glob[i + 1 : i + 2] == "!")
        j += glob[j : j + 1] == "]"  # fnmatch: a "]" first in a class is one of its characters
        end = glob.find("]", j) if j < none_from else -1
        if end == -1:
            none_from = min(none_from, j)
            out.append("[[]")
            i += 1
        else:
            out.append(glob[i : end + 1])
            i = end + 1
    return "".join(out)


def _weight(items: Any) -> int:
    """Items *items* (re's parse) unroll into, each repeat counting its body ``min + 1`` times; it stops
    counting a little past MAX_PATTERN_WEIGHT. Recursion is bounded by MAX_PATTERN_DEPTH."""
    total = 0
    for op, av in items:
        if op in _REPEATS:
            low, _high, body = av
            total += _weight(body) * (low + 1)
        else:
            total += 1 + sum(_weight(part) for part in _subpatterns(av))
        if total > MAX_PATTERN_WEIGHT:
            break
    return total


def _subpatterns(av: Any) -> list[Any]:
    """The subpatterns inside an item's argument (a group's body, a branch's alternatives)."""
    if isinstance(av, _parser.SubPattern):
        return [av]
    if isinstance(av, tuple | list):
        return [sub for part in av for sub in _subpatterns(part)]
    return []


def as_re_reads(pattern: str) -> str:
    """*pattern*, unchanged for re, written so that regex reads it as re does.

    Escaped: a ``{`` that does not begin a quantifier (regex reads ``{e<=1}`` as
    a fuzzy match, ``x{error}`` as an error; re reads both literally), and a
    ``[`` inside a class (regex reads ``[[:alpha:]]`` as a POSIX class). Not
    for a verbose pattern, whose comments may hold any of these.

    Errors: none.
    """
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        char = pattern[i]
        if char == "\\":
            end = pattern.find("}", i) + 1 if pattern.startswith("N{", i + 1) else i + 2
            end = end if end > i else n  # \N{ never closed: re has refused it already
            out.append(pattern[i:end])
            i = end
            continue
        if in_class:
            in_class = char != "]"
            out.append("\\[" if char == "[" else char)
        elif char == "[":
            in_class = True
            start = i + 1 + (pattern[i + 1 : i + 2] == "^")
            out.append(pattern[i:start] + ("]" if pattern[start : start + 1] == "]" else ""))
            i = start + (pattern[start : start + 1] == "]") - 1
        elif char == "{" and not _QUANTIFIER.match(pattern, i):
            out.append("\\{")
        else:
            out.append(char)
        i += 1
    return "".join(out)
