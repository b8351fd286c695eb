"""mmd/patterns.py: untrusted regexes keep re's meaning, compile within limits and stop at a deadline.

The hostile cases would hang (or exhaust memory) without the module: ``^(a|a)+$`` against forty a's and
a ``!`` takes 2**40 steps in re; ``(?:a{1000}){1000}`` makes regex build a million items. They are
asserted by what comes back, never by how long it took.
"""

from __future__ import annotations

import fnmatch
import re
import time

import pytest

from mmd import patterns
from mmd.patterns import Deadline, TooComplex, TooSlow

# Ordinary patterns and texts: re's answer is the expected one, for search, match and fullmatch.
ORDINARY = [
    r"^\d+\.\d+\.\d+$",
    r"\d",
    r"^(a$|b)",
    r"[A-Za-z_][A-Za-z0-9_]*",
    r"[^/]+\.py\Z",
    r"\bmain\b",
    r"(ab)\1",
    r"(?=a)ab",
    r"(?<=a)b",
    r"(?i)MAIN",
    r"Edit|Write",
    r"mcp__.*",
    r"a{2,3}",
    r"a{,2}b",
    r"[]a]+",
    r"[^]a]",
    r"\N{LATIN SMALL LETTER A}",
    # re reads these braces literally; regex alone would not (an error, a fuzzy match).
    r"x{error}",
    r"foo{e<=1}",
    r"\{1\}",
]
TEXTS = ["", "a", "aa", "aab", "abab", "b", "1.4.2", "1.4.2\n", "v1", "main", "a main()", "Edit", "Editor",
         "mcp__x", "x{error}", "foo{e<=1}", "fxo", "a]", ":]", "{1}", "src/app.py"]  # fmt: skip


@pytest.mark.parametrize("pattern", ORDINARY)
def test_ordinary_patterns_mean_what_they_mean_in_re(pattern: str) -> None:
    compiled, reference = patterns.compile(pattern), re.compile(pattern)
    for text in TEXTS:
        deadline = Deadline()
        assert compiled.search(text, deadline) == (reference.search(text) is not None), text
        assert compiled.match(text, deadline) == (reference.match(text) is not None), text
        assert compiled.fullmatch(text, deadline) == (reference.fullmatch(text) is not None), text


def test_a_bracket_in_a_class_is_a_bracket_as_in_re() -> None:
    # regex alone reads [[:alpha:]] as a POSIX class; re as the class [[:alph] and then "]".
    with pytest.warns(FutureWarning, match="nested set"):  # re's own warning, from its parser
        compiled = patterns.compile("[[:alpha:]]")
    assert compiled.fullmatch("a]", Deadline()) and compiled.fullmatch(":]", Deadline())
    assert not compiled.fullmatch("a", Deadline())


def test_flags_are_re_flags() -> None:
    assert patterns.compile("main", re.IGNORECASE).search("def MAIN", Deadline())
    assert not patterns.compile("main").search("def MAIN", Deadline())
    assert patterns.compile("a.b", re.DOTALL).fullmatch("a\nb", Deadline())
    assert not patterns.compile(r"\w", re.ASCII).search("é", Deadline())


@pytest.mark.parametrize("pattern", ["main(", "[a-", "a{2,1}", "(?P<x>a)(?P<x>b)", r"\p{L}", "*a"])
def test_what_re_refuses_is_refused_with_res_message(pattern: str) -> None:
    with pytest.raises(re.error) as expected:
        re.compile(pattern)
    with pytest.raises(re.error) as got:
        patterns.compile(pattern)
    assert str(got.value) == str(expected.value)


def test_a_backtracking_match_stops_at_its_deadline() -> None:
    slow = patterns.compile(r"^(a|a)+$")  # 2**40 ways to fail on the text below
    with pytest.raises(TooSlow) as info:
        slow.search("a" * 40 + "!", Deadline())
    assert info.value.pattern == "^(a|a)+$"
    assert str(info.value) == f"matching the pattern ^(a|a)+$ took longer than {patterns.SECONDS:g} s"
    assert slow.search("a" * 40, Deadline())  # the same pattern on a text it matches


def test_a_deadline_is_shared_by_the_matches_of_one_check() -> None:
    deadline = Deadline()
    with pytest.raises(TooSlow):
        patterns.compile(r"(a|a)+\Z").search("a" * 40 + "!", deadline)
    with pytest.raises(TooSlow):  # nothing left for the next match, however easy
        patterns.compile("a").search("a", deadline)
    with pytest.raises(TooSlow) as info:  # one match's own limit, within a longer deadline
        patterns.compile(r"(a|a)+\Z").search("a" * 40 + "!", Deadline(60), each=0.05)
    assert info.value.seconds == 0.05


def test_a_busy_machine_is_not_a_slow_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    # Counted by the clock, a hook's `Edit|Write` missed `Write` on a busy CI machine: 0.2 s passed while
    # the thread waited for a core (or imported regex), and the guard hook was skipped. The default deadline
    # counts this thread's CPU; a match regex stopped by the clock before the thread had the CPU runs again.
    deadline = Deadline()
    time.sleep(0.3)  # waiting is not matching
    assert deadline.left() > 0.1
    clock = Deadline(0.2)  # a deadline given its seconds (a listing's) is the clock's
    time.sleep(0.25)
    assert clock.left() < 0

    class Preempted:
        """A compiled pattern whose first runs are stopped by the clock at once, as on a loaded machine."""

        def __init__(self, stops: int) -> None:
            self.stops = stops

        def fullmatch(self, text: str, timeout: float, concurrent: bool) -> object | None:
            if self.stops:
                self.stops -= 1
                raise TimeoutError("regex timed out")
            return object() if text == "Write" else None

    assert patterns.Pattern("Edit|Write", Preempted(2), 1).fullmatch("Write", Deadline())
    with pytest.raises(TooSlow):  # RETRIES bounds the runs: a machine that never lets it finish is slow
        patterns.Pattern("Edit|Write", Preempted(patterns.RETRIES + 1), 1).fullmatch("Write", Deadline())


def test_the_regex_of_the_fuzzing_report_answers_at_once() -> None:
    # ^(a+)+$ hung the daemon in re; regex sees it cannot match, well within the deadline.
    assert not patterns.compile(r"^(a+)+$").search("a" * 34 + "!", Deadline())


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("(?:a{1000}){1000}", "too complex: compiled, it would unroll into more than 10,000 items"),
        ("(?:" * 20 + "a" + ")+" * 20, "too complex: compiled, it would unroll"),  # each + doubles it
        ("x{4294967294}", "too complex: compiled, it would unroll"),
        ("(" * 40 + "a" + ")" * 40, "too complex: groups nested 40 deep; the limit is 32"),
        ("x" * 10_001, "too long: 10,001 characters; the limit is 10,000"),
    ],
)
def test_patterns_that_would_take_long_to_compile_are_refused(pattern: str, problem: str) -> None:
    # Compiled by regex, the first three take gigabytes; the fourth passes Python's recursion limit.
    with pytest.raises(TooComplex) as info:
        patterns.compile(pattern)
    assert str(info.value).startswith(problem)
    assert isinstance(info.value, re.error)


def test_repeats_within_the_limit_compile() -> None:
    assert patterns.compile(r"[0-9a-f]{40}").fullmatch("0" * 40, Deadline())
    assert patterns.compile(r"(?:\d{3}-){3}\d{4}").fullmatch("555-555-555-5555", Deadline())
    assert patterns.compile("(?:a{100}){98}").fullmatch("a" * 9800, Deadline())  # 9,999 items


def test_compiled_patterns_are_cached_within_bounds() -> None:
    assert patterns.compile("cached+") is patterns.compile("cached+")
    for n in range(300):
        patterns.compile(f"pattern{n}")
    assert len(patterns._cache) <= patterns._CACHE_ENTRIES
    assert sum(p.weight for p in patterns._cache.values()) <= patterns._CACHE_WEIGHT


GLOBS = [
    "*.py",
    "src/*",
    "[ab]*",
    "[!a]*",
    "[]]",
    "[!]]",
    "[]a]x",
    "[][",
    "[!][",
    "a[",
    "[a-c]?",
    "*[",
    "[[]",
]
NAMES = ["a.py", "src/x", "a", "b", "c", "]", "x]", "ax", "]x", "[", "a[", "ab", "[][", "x[", "b["]


@pytest.mark.parametrize("glob", GLOBS)
def test_fnmatch_is_fnmatchcase(glob: str) -> None:
    for name in NAMES:
        assert patterns.fnmatch(name, glob) == fnmatch.fnmatchcase(name, glob), name


def test_fnmatch_reads_unclosed_brackets_in_one_pass() -> None:
    # fnmatch.translate scans to the end for each "[" that opens no class: this glob took 5 s, and one
    # of 400 KB (a hook matcher in a cloned repository's settings) hours.
    glob = "[a" * 4_999
    assert patterns.fnmatch(glob, glob)
    assert not patterns.fnmatch("[a", glob)
    assert not patterns.fnmatch(glob, "[a" * 200_000)  # past MAX_PATTERN_CHARS: matches nothing
