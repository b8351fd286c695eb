"""Output capture: decoding per stream, spill bytes, head/tail budgets and the marker."""

from __future__ import annotations

import io
import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmd.procs import output
from mmd.procs.output import HeadTail, OutputCapture, printable

from ...budget import examples

# Pieces that make outputs with short and long lines, multibyte and invalid UTF-8.
PIECES = [b"a", b"bc", b"\n", b"\n", b"\xe2\x82\xac", b"\xff", b"\0", b"0123456789"]


def lines_of(data: bytes) -> int:
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))


def feed_in_chunks(view: HeadTail, data: bytes, cuts: list[int]) -> None:
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        view.add(data[start:end])


@settings(max_examples=examples(400), deadline=None)
@given(
    data=st.lists(st.sampled_from(PIECES), max_size=300).map(b"".join),
    cuts=st.lists(st.integers(min_value=0), max_size=20),
    max_bytes=st.integers(min_value=1, max_value=120),
    max_lines=st.integers(min_value=1, max_value=16),
)
def test_head_tail_accounting_is_exact(data: bytes, cuts: list[int], max_bytes: int, max_lines: int) -> None:
    view = HeadTail(max_bytes, max_lines)
    feed_in_chunks(view, data, cuts)
    assert view.total_bytes == len(data)
    assert view.total_lines == lines_of(data)
    assert view.truncated == (len(data) > max_bytes or lines_of(data) > max_lines)
    if not view.truncated:
        assert view.whole() == data
        return
    cut = view.cut()
    middle = data[len(cut.head) : len(data) - len(cut.tail)]
    assert data.startswith(cut.head) and data.endswith(cut.tail)
    assert len(cut.head) + cut.cut_bytes + len(cut.tail) == len(data)
    assert cut.cut_bytes > 0
    assert cut.cut_lines == middle.count(b"\n")
    assert len(cut.head) <= max_bytes // 2 and cut.head.count(b"\n") <= max_lines // 2
    assert len(cut.tail) <= max_bytes - max_bytes // 2
    assert lines_of(cut.tail) <= max_lines - max_lines // 2
    assert cut.first_line == cut.head.count(b"\n") + 1
    assert cut.first_line <= cut.last_line


def test_head_and_tail_keep_whole_lines() -> None:
    data = b"".join(b"%d\n" % i for i in range(1, 1001))
    view = HeadTail(max_bytes=100, max_lines=10)
    view.add(data)
    cut = view.cut()
    assert cut.head == b"1\n2\n3\n4\n5\n"
    assert cut.tail == b"996\n997\n998\n999\n1000\n"
    assert (cut.cut_lines, cut.first_line, cut.last_line) == (990, 6, 995)


def test_byte_budget_binds_before_line_budget() -> None:
    data = b"".join(b"line %03d %s\n" % (i, b"x" * 20) for i in range(50))
    view = HeadTail(max_bytes=200, max_lines=400)
    for i in range(0, len(data), 7):
        view.add(data[i : i + 7])
    cut = view.cut()
    assert cut.head.endswith(b"\n") and len(cut.head) <= 100
    assert cut.tail.startswith(b"line ") and cut.tail.endswith(b"line 049 " + b"x" * 20 + b"\n")


def test_one_huge_line_is_cut_inside_but_not_inside_a_character() -> None:
    data = "€" * 1000  # 3 bytes each, no newline
    view = HeadTail(max_bytes=100, max_lines=10)
    view.add(data.encode())
    cut = view.cut()
    assert cut.head.decode() == "€" * 16  # 48 bytes: 50 would split a character
    assert cut.tail.decode() == "€" * 16
    assert (cut.cut_lines, cut.first_line, cut.last_line) == (0, 1, 1)


def test_a_line_cut_at_its_start_is_dropped_from_the_tail() -> None:
    view = HeadTail(max_bytes=20, max_lines=100)
    view.add(b"a" * 100 + b"\n" + b"end\n")
    cut = view.cut()
    assert cut.tail == b"end\n"
    assert cut.last_line == 1


def test_budgets_must_be_positive() -> None:
    with pytest.raises(ValueError):
        HeadTail(0, 10)


def capture(**kw: int) -> tuple[OutputCapture, io.BytesIO, list[tuple[str, str]]]:
    spill = io.BytesIO()
    events: list[tuple[str, str]] = []
    cap = OutputCapture(
        spill,
        max_bytes=kw.get("max_bytes", 1000),
        max_lines=kw.get("max_lines", 100),
        on_output=lambda stream, text: events.append((stream, text)),
    )
    return cap, spill, events


def test_character_split_across_reads_is_decoded_whole() -> None:
    cap, spill, events = capture()
    cap.feed("stdout", b"price: \xe2")
    cap.feed("stdout", b"\x82")
    cap.feed("stdout", b"\xac\n")
    cap.finish()
    assert "".join(text for _, text in events) == "price: €\n"
    assert "\ufffd" not in cap.render(None)
    assert spill.getvalue() == "price: €\n".encode()


def test_streams_interleave_without_splitting_characters() -> None:
    cap, spill, events = capture()
    cap.feed("stdout", b"\xe2\x82")
    cap.feed("stderr", b"x")
    cap.feed("stdout", b"\xac")
    cap.finish()
    assert events == [("stderr", "x"), ("stdout", "€")]
    assert spill.getvalue() == "x€".encode()
    assert cap.render(None) == "x€"


def test_invalid_bytes_and_unfinished_character_at_eof() -> None:
    cap, spill, events = capture()
    cap.feed("stdout", b"ok \xff ")
    cap.feed("stdout", b"\xe2\x82")
    cap.end("stdout")
    assert "".join(text for _, text in events) == "ok \ufffd \ufffd"
    assert spill.getvalue() == b"ok \xff \xe2\x82"
    assert cap.total_bytes == 7


def test_nul_is_shown_as_escape_but_spilled_raw() -> None:
    cap, spill, events = capture()
    cap.feed("stdout", b"a\0b")
    cap.finish()
    assert events == [("stdout", "a\\0b")]
    assert cap.render(None) == "a\\0b" == printable("a\0b")
    assert spill.getvalue() == b"a\0b"


def test_render_marker_names_the_spill_file_and_counts() -> None:
    cap, spill, _ = capture(max_bytes=100, max_lines=10)
    data = b"".join(b"%d\n" % i for i in range(1, 1001))
    for i in range(0, len(data), 64):
        cap.feed("stdout", data[i : i + 64])
    cap.finish()
    text = cap.render("/tmp/s/spill.log")
    head, marker, tail = text.split("\n[")[0], text.split("\n")[5], text.split("]\n")[1]
    assert head == "1\n2\n3\n4\n5"
    assert tail == "996\n997\n998\n999\n1000\n"
    m = re.fullmatch(r"\[\.\.\. ([\d,]+) bytes / ([\d,]+) lines cut \(lines 6–995\); (.*) \.\.\.\]", marker)
    assert m, marker
    cut_bytes = int(m.group(1).replace(",", ""))
    assert cut_bytes == len(data) - len(b"1\n2\n3\n4\n5\n") - len(b"996\n997\n998\n999\n1000\n")
    assert m.group(2) == "990"
    assert "/tmp/s/spill.log" in m.group(3) and "read_file" in m.group(3)
    assert "3,893 bytes, 1,000 lines" in m.group(3)
    assert spill.getvalue() == data


def test_render_without_spill_file_says_so() -> None:
    cap, _, _ = capture(max_bytes=10, max_lines=10)
    cap.feed("stdout", b"x" * 100)
    assert "not kept" in cap.render(None)


def test_a_spill_file_given_as_its_opener_is_opened_once_when_the_output_is_first_cut() -> None:
    opened: list[io.BytesIO] = []

    def opener() -> io.BytesIO:
        opened.append(io.BytesIO())
        return opened[-1]

    small = OutputCapture(opener, max_bytes=100, max_lines=10)
    small.feed("stdout", b"a few\nlines\n")
    small.finish()
    assert not small.truncated and opened == []

    big = OutputCapture(opener, max_bytes=100, max_lines=10)
    data = b"".join(b"line %d\n" % i for i in range(50))
    for start in range(0, len(data), 7):  # in reads of 7 bytes: the cut comes inside one
        big.feed("stdout" if start % 2 else "stderr", data[start : start + 7])
    big.finish()
    assert big.truncated and len(opened) == 1
    assert opened[0].getvalue() == data  # the bytes held before the cut, then the rest


def test_the_spill_file_keeps_max_spill_bytes_and_says_where_it_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `yes` run until its timeout wrote tens of gigabytes to the spill folder: the file now keeps the start,
    # the counts go on, and the model is told the file holds the first bytes only.
    monkeypatch.setattr(output, "MAX_SPILL_BYTES", 10_000)
    spill = io.BytesIO()
    cap = OutputCapture(lambda: spill, max_bytes=100, max_lines=10)
    for _ in range(1_000):
        cap.feed("stdout", b"y\n" * 50)  # 100,000 bytes in all
    cap.finish()
    kept = spill.getvalue()
    assert kept == b"y\n" * 5_000 + b"\n[mm: the output went on past 10,000 bytes; the rest was not kept]\n"
    assert cap.spill_full and cap.total_bytes == 100_000 and cap.total_lines == 50_000
    assert (
        "the first 10,000 bytes of the output (100,000 bytes, 50,000 lines) are in /s/out.log — read any range "
        "of them with read_file" in cap.render("/s/out.log")
    )
    small = OutputCapture(lambda: io.BytesIO(), max_bytes=100, max_lines=10)
    small.feed("stdout", b"y\n" * 500)
    assert not small.spill_full and "the whole output (1,000 bytes, 500 lines) is in /s/o" in small.render(
        "/s/o"
    )
