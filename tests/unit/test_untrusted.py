"""Input nested deep or grown big (issue 13, item 1): the decode layer, driven with thousands of generated nestings.

Each decoder of input mm did not write runs a depth (and size) check first (mmd/untrusted.py,
mmd/rpc/framing.py). A real daemon fed the same by a model, a client, a hook and MCP servers is in
tests/e2e/adversarial/test_nesting.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmd import contract, untrusted
from mmd.models import recovery
from mmd.rpc import DEFAULT_MAX_DEPTH, FrameError, Splitter
from mmd.untrusted import (
    MAX_ARGUMENTS_BYTES,
    MAX_DEPTH,
    MAX_VALUES,
    NotRegularFile,
    TooDeep,
    TooMany,
    bounded_lines,
    check_json,
    first_names,
    first_value_depth,
    json_depth,
    open_regular,
    read_at_most,
    value_depth,
    walk,
)

from ..budget import examples
from ..folders import DEEP, chain

# Generated cases per hypothesis test: each stays well under 30 s on two cores.
CASES = settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Pieces of a JSON-ish text that move the nesting, or try to confuse a scan of it: strings
# holding brackets, escaped quotes, backslashes at the end of a string, stray closers.
PIECES = ["[", "{", '{"a":', "]", "}", ",", '"', '\\"', "\\", '"]"', '"[{"', '"\\\\"', "1", " ", ":", "\n"]


@st.composite
def bracket_texts(draw: Any) -> str:
    runs = draw(st.lists(st.tuples(st.integers(1, 400), st.sampled_from(PIECES)), max_size=12))
    return "".join(piece * count for count, piece in runs)


@st.composite
def argument_texts(draw: Any) -> tuple[str, int]:
    """A valid arguments object nesting *depth* levels, brackets of either kind, noise in strings."""
    depth = draw(st.integers(1, 3000))
    kinds = random.Random(draw(st.integers(0, 2**32))).choices(["[", "{"], k=depth - 1)
    leaf = json.dumps(draw(st.text(alphabet='[]{}"\\ab', max_size=8)))
    opened = "".join("[" if k == "[" else '{"k": ' for k in kinds)
    closed = "".join("]" if k == "[" else "}" for k in reversed(kinds))
    space = draw(st.sampled_from(["", " ", "\n  "]))
    return "{" + space + '"p":' + space + opened + leaf + closed + space + "}", depth


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ aé', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=60,
)


@st.composite
def msgpack_nestings(draw: Any) -> tuple[bytes, int]:
    """A msgpack frame nesting arrays and maps *depth* levels, with every header width."""
    depth = draw(st.integers(0, 400))
    rng = random.Random(draw(st.integers(0, 2**32)))  # one draw: hypothesis records each of its own
    headers = [
        b"\x91",  # fixarray of one
        b"\xdc\x00\x01",  # array16
        b"\xdd\x00\x00\x00\x01",  # array32
        b"\x81\xa1k",  # fixmap of one: a key, then the value is the next level
        b"\xde\x00\x01\xa1k",  # map16
        b"\x92\xc0",  # fixarray of two: nil, then the next level
    ]
    return b"".join(rng.choices(headers, k=depth)) + b"\xc0", depth


@CASES
@given(argument_texts())
def test_arguments_at_any_depth_are_decoded_or_answered_with_their_depth(case: tuple[str, int]) -> None:
    text, depth = case
    try:
        args = contract.parse_arguments(text)
    except contract.InvalidArguments as err:
        assert depth > MAX_DEPTH, err.reason
        assert err.code == "too_deep"
        assert err.reason == f"The arguments are nested too deep: {depth:,} levels; the limit is {MAX_DEPTH}."
    else:
        assert depth <= MAX_DEPTH
        assert value_depth(args) == depth


@CASES
@given(json_values)
def test_the_depth_scan_agrees_with_the_decoded_value(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    depth = value_depth(value)
    assert json_depth(text) == depth
    assert json_depth(text.encode()) == depth
    assert first_value_depth(" " + text + " [[[", 1, stop_past=1000)[0] == depth


@CASES
@given(bracket_texts())
def test_text_that_passes_the_check_never_makes_a_decoder_recurse_too_far(text: str) -> None:
    # Python's limit is 1000 frames: a text that passes at 800 must decode or fail as a ValueError,
    # from its start (json, msgspec) or from any brace inside it (raw_decode, as recovery does).
    try:
        check_json(text, max_depth=800)
    except TooDeep:
        pass
    else:
        for decode in (json.loads, msgspec.json.decode):
            with contextlib.suppress(ValueError):  # anything but RecursionError
                decode(text)
    decoder = json.JSONDecoder()
    for start in [i for i, c in enumerate(text) if c == "{"][:20]:
        if first_value_depth(text, start, stop_past=800)[0] <= 800:
            with contextlib.suppress(ValueError):
                decoder.raw_decode(text, start)


@settings(max_examples=60, deadline=None)
@given(st.integers(MAX_ARGUMENTS_BYTES - 64, MAX_ARGUMENTS_BYTES + 64), st.sampled_from(["a", "é"]))
def test_arguments_past_the_size_limit_are_answered_with_their_size(size: int, char: str) -> None:
    head = '{"content": "'
    body = char * ((size - len(head) - 2) // len(char.encode()))
    text = head + body + '"}'
    actual = len(text.encode())
    try:
        contract.parse_arguments(text)
    except contract.InvalidArguments as err:
        assert actual > MAX_ARGUMENTS_BYTES
        assert (err.code, err.reason) == (
            "too_large",
            f"The arguments are too large: {actual:,} bytes; the limit is {MAX_ARGUMENTS_BYTES:,} bytes.",
        )
    else:
        assert actual <= MAX_ARGUMENTS_BYTES


@settings(CASES, max_examples=examples(600))  # four recoveries per text
@given(bracket_texts())
def test_recovery_never_recurses_on_any_text(text: str) -> None:
    for wrapped in (text, f"<tool_call>{text}</tool_call>", f"```json\n{text}\n```", f"see {{{text}"):
        recovery.recover(wrapped, {"read_file"})


@CASES
@given(msgpack_nestings())
def test_frames_are_refused_exactly_past_the_depth_limit(case: tuple[bytes, int]) -> None:
    frame, depth = case
    try:
        frames = Splitter().feed(frame)
    except FrameError as exc:
        assert depth > DEFAULT_MAX_DEPTH
        assert f"nested more than {DEFAULT_MAX_DEPTH} levels deep" in str(exc)
    else:
        assert depth <= DEFAULT_MAX_DEPTH and frames == [frame]
        msgspec.msgpack.decode(frame)  # decodes without nearing the recursion limit


# --- files mm did not write ---------------------------------------------------------------------------


@CASES
@given(
    st.lists(st.text(alphabet="ab\r\né€😀", max_size=40), max_size=8), st.integers(4, 30), st.integers(1, 9)
)
def test_bounded_lines_are_the_lf_lines_cut_to_the_bound_with_their_whole_length(
    lines: list[str], most: int, chunk: int
) -> None:
    data = "\n".join(lines).encode()
    expected = data.split(b"\n")
    if expected[-1] == b"":  # a final LF ends the last line; an empty file has none
        expected.pop()
    got = list(bounded_lines(io.BufferedReader(io.BytesIO(data), buffer_size=8), most, chunk))
    assert len(got) == len(expected)
    for n, ((head, chars), line) in enumerate(zip(got, expected, strict=True)):
        ended = n < len(expected) - 1 or data.endswith(b"\n")
        whole = line.removesuffix(b"\r") if ended else line  # the CR of a CRLF
        assert head == whole[:most] and chars == len(whole.decode())


def test_open_regular_opens_a_file_and_refuses_anything_else_without_waiting(tmp_path) -> None:
    (tmp_path / "f").write_text("text")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    with open_regular(tmp_path / "link") as f:
        assert f.read() == b"text"
    os.mkfifo(tmp_path / "pipe")  # nobody writes it: a blocking open would wait for ever
    before = set(os.listdir("/proc/self/fd"))
    for path, kind in [
        (tmp_path / "pipe", "a named pipe"),
        ("/dev/null", "a character device"),
        (tmp_path, "a folder"),
    ]:
        with pytest.raises(NotRegularFile) as err:
            open_regular(path)
        assert (err.value.strerror, err.value.filename) == (f"not a regular file but {kind}", str(path))
    assert set(os.listdir("/proc/self/fd")) == before  # each refused descriptor was closed


def test_a_bounded_read_asks_for_what_the_file_holds_and_still_tells_a_file_past_the_limit(
    tmp_path, monkeypatch
) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"x" * 3000)
    asked: list[int] = []

    def reads(path: Path) -> bytes:
        with open_regular(path) as f:
            real = f.read
            monkeypatch.setattr(f, "read", lambda n=-1: asked.append(n) or real(n), raising=False)
            return read_at_most(f, 256 * 1024)

    assert reads(small) == b"x" * 3000 and asked == [3001]  # not a 256 KiB buffer for 3 KB
    big = tmp_path / "big"
    big.write_bytes(b"y" * 5000)
    with open_regular(big) as f:
        assert read_at_most(f, 4096) == b"y" * 4097  # one past the limit: too big, as before
    # A file that holds more than it said (one of /proc, or one grown since): read on to the limit.
    with open_regular("/proc/self/status") as f:
        assert b"\nPid:" in read_at_most(f, 1 << 20)
    real_fstat = os.fstat
    monkeypatch.setattr(
        os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 100, *real_fstat(fd)[7:]))
    )
    with open_regular(small) as f:
        assert read_at_most(f, 256 * 1024) == b"x" * 3000
    with open_regular(big) as f:
        assert read_at_most(f, 4096) == b"y" * 4097


# --- folders mm did not make ----------------------------------------------------------------------


def test_walk_goes_down_a_chain_deeper_than_the_recursion_limit(tmp_path) -> None:
    with chain(tmp_path) as bottom:
        (bottom / "bottom.txt").write_text("x")
        seen = list(walk(tmp_path))
        assert len(seen) == DEEP + 1
        assert seen[-1][2] == ["bottom.txt"] and seen[-1][0].count("/d") == DEEP
        if sys.version_info < (3, 12):  # what os.walk did here (it recurses once per folder)
            with pytest.raises(RecursionError):
                list(os.walk(tmp_path))


def test_walk_gives_what_os_walk_gives_and_may_be_pruned(tmp_path) -> None:
    for rel in ("a/b/c", "a/skip/x", "e", "f/g"):
        (tmp_path / rel).mkdir(parents=True)
    for rel in ("top.txt", "a/one", "a/b/c/two", "a/skip/x/no", "f/g/three"):
        (tmp_path / rel).write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "a")  # a subfolder by name, never entered
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "e").chmod(0)  # cannot be listed (unless root): left out, as os.walk leaves it

    def pruned(walker):
        out = []
        for top, dirs, files in walker:
            dirs[:] = sorted(d for d in dirs if d != "skip")
            out.append((top, list(dirs), sorted(files)))
        return out

    try:
        assert pruned(walk(tmp_path)) == pruned(os.walk(tmp_path))
        assert any(top.endswith("/f/g") for top, _, _ in pruned(walk(tmp_path)))
        assert not any("skip" in top or top.endswith("/link") for top, _, _ in pruned(walk(tmp_path)))
    finally:
        (tmp_path / "e").chmod(0o700)


def test_first_names_stops_one_past_what_is_asked(tmp_path, monkeypatch) -> None:
    for i in range(100):
        (tmp_path / f"n{i:03}").touch()
    read = []
    real = os.scandir

    def counted(path):
        listing = real(path)

        class Counted:
            def __enter__(self):
                listing.__enter__()
                return (read.append(e.name) or e for e in listing)

            def __exit__(self, *exc):
                return listing.__exit__(*exc)

        return Counted()

    monkeypatch.setattr(os, "scandir", counted)
    names = first_names(tmp_path, 10)
    assert len(names) == 11 and read == names  # the file system's first 11: the folder holds more
    with real(tmp_path) as listing:
        assert names == [e.name for e in listing][:11]
    assert sorted(first_names(tmp_path, 1000)) == [f"n{i:03}" for i in range(100)]


# --- the count of values --------------------------------------------------------------------------


def _values(value: Any) -> int:
    """The values a decoded JSON value holds, itself and its keys included (the count json_values bounds)."""
    if isinstance(value, dict):
        return 1 + sum(1 + _values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


def _generated(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 3 or pick < 0.3:
        return rng.choice([1, "a,b", "{[:", "", None, '\\"x', 2.5, "]}" * 5, "\u00e9,"])
    if pick < 0.65:
        return [_generated(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {
        rng.choice(["k", ",:", '"{', ""]) + str(i): _generated(rng, depth + 1)
        for i in range(rng.randint(0, 4))
    }


@pytest.mark.parametrize("window", [7, 1 << 20])
def test_json_values_counts_what_a_decoder_builds_and_never_less(monkeypatch, window) -> None:
    # Exact for compact JSON; with a window that cuts brackets apart, an empty pair split between two windows
    # counts one more: never less, so nothing is let through.
    monkeypatch.setattr(untrusted, "_WINDOW", window)
    rng = random.Random(window)
    for _ in range(3000):
        value = _generated(rng)
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        found = {untrusted.json_values(text), untrusted.json_values(text.encode())}
        assert found == {_values(value)} if window > 7 else min(found) >= _values(value), text


def test_a_million_values_in_3_mb_are_refused_and_a_string_of_commas_is_not() -> None:
    # A text decoded on the event loop (at most OFF_LOOP_BYTES) holds at most MAX_VALUES values uncounted.
    assert untrusted.OFF_LOOP_BYTES >= MAX_VALUES
    wide = "[" + "{}," * MAX_VALUES + "{}]"
    with pytest.raises(TooMany, match=f"the answer is too big once decoded: more than {MAX_VALUES:,} values"):
        check_json(wide, what="the answer is")
    with pytest.raises(TooMany):
        check_json(wide.encode(), what="the answer is")
    # 10 M short strings: counted a window at a time, stopped once past the limit (a whole regex pass took
    # 1.5 GB and 4 s).
    strings = b'[{"type":"text","text":""},' * 2_000_000 + b"{}]"
    with pytest.raises(TooMany):
        check_json(strings)
    # Text of commas and colons inside strings counts as one value each string.
    check_json(json.dumps({"csv": "a,b:c," * 1_000_000, "rows": [[1, 2]] * 1000}))
    check_json("[" + "0," * (MAX_VALUES // 2) + "0]")  # under the limit
