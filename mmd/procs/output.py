"""Capture a child's output: every byte to a spill file, a bounded view for the model.

Bytes arrive per stream (stdout, stderr) in reads of any size. Each stream has
its own incremental UTF-8 decoder, so a character split across two reads is
decoded whole, and only whole characters are released: the released bytes of
both streams go, in arrival order, to the spill file and to a :class:`HeadTail`
that keeps the first and the last part of the output within fixed budgets.
Memory is O(budget + one read) whatever the size of the output. The spill file can be
opened when the output is first cut: the bytes before are held until then, so that output
within the budgets (most of it) never touches the disk.

NUL bytes are shown as the two characters ``\\0`` (the C escape) in what the
model and the user read; the spill file keeps the raw bytes.

This module opens no file and touches no process: the caller gives the sink, or what opens it.
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable
from typing import Protocol

import msgspec

from .spill import reason

# The most of one output kept in its spill file: a command the model ran that printed without end (`yes`
# until its timeout) had every byte kept: ~80 GB in the default 120 s at the 0.7 GB/s the supervisor reads. The count goes on; the
# file says where it stopped. A gigabyte: room for any build log, and what the tests stream whole.
MAX_SPILL_BYTES = 1024 * 1024 * 1024
# How a NUL byte is shown: a model reads a C escape; a raw NUL confuses tokenizers and terminals.
NUL_SHOWN = "\\0"
# UTF-8 decoding of a read: (text, bytes used); with final False, an unfinished last character is left.
_decode_utf8 = codecs.utf_8_decode


def printable(text: str) -> str:
    """``text`` as the model and the user read it: NUL bytes shown as ``\\0``."""
    return text.replace("\0", NUL_SHOWN)


class Cut(msgspec.Struct, frozen=True):
    """What the model reads of an output that outgrew its budget."""

    head: bytes  # the first bytes, ending at a line end when one fits
    tail: bytes  # the last bytes, starting at a line start when one fits
    cut_bytes: int  # bytes between head and tail
    cut_lines: int  # line breaks between head and tail
    first_line: int  # number (from 1) of the first line cut, whole or in part
    last_line: int  # number of the last line cut, whole or in part


class HeadTail:
    """The first and last bytes of a stream, within a byte and a line budget.

    Until the stream outgrows either budget every byte is kept, since the model
    reads it all. From then on the head is frozen at half of each budget, ending
    at a line end when one fits, and the tail is a ring of lines that holds at
    most the other half of each budget.
    """

    def __init__(self, max_bytes: int, max_lines: int) -> None:
        if max_bytes < 1 or max_lines < 1:
            raise ValueError(f"budgets must be positive, not {max_bytes} bytes / {max_lines} lines")
        self.max_bytes = max_bytes
        self.max_lines = max_lines
        self.total_bytes = 0
        self.total_newlines = 0
        self._open_line = False  # the last byte seen was not a newline
        self._whole: bytearray | None = bytearray()  # everything, until the budgets are outgrown
        self._head = b""
        self._tail: deque[bytes] = deque()  # lines, each with its newline but perhaps the last
        self._tail_size = 0
        self._tail_clean = True  # the tail starts at the start of a line
        self._tail_max_bytes = max_bytes - max_bytes // 2
        self._tail_max_lines = max_lines - max_lines // 2

    @property
    def total_lines(self) -> int:
        """Lines seen, an unterminated last line included."""
        return self.total_newlines + self._open_line

    @property
    def truncated(self) -> bool:
        """Whether the output outgrew a budget, so the model reads head and tail only."""
        return self._whole is None

    def add(self, data: bytes) -> None:
        """Account for ``data``, the next bytes of the stream."""
        if not data:
            return
        self.total_bytes += len(data)
        self.total_newlines += data.count(b"\n")
        self._open_line = data[-1] != 0x0A
        if self._whole is None:
            self._push_tail(data)
            return
        self._whole += data
        if self.total_bytes > self.max_bytes or self.total_lines > self.max_lines:
            self._split()

    def whole(self) -> bytes:
        """Every byte seen. Errors: RuntimeError once truncated."""
        if self._whole is None:
            raise RuntimeError("the output was truncated; use cut()")
        return bytes(self._whole)

    def cut(self) -> Cut:
        """Head, tail and what lies between. Errors: RuntimeError if not truncated."""
        if self._whole is not None:
            raise RuntimeError("the output was not truncated; use whole()")
        lines, clean = list(self._tail), self._tail_clean
        if not clean and len(lines) > 1:
            # A line whose start was cut is dropped so the tail starts at a line start.
            lines.pop(0)
            clean = True
        tail = b"".join(lines)
        if not clean:
            tail = tail[_continuation_run(tail) :]
        head_nl, tail_nl = self._head.count(b"\n"), tail.count(b"\n")
        cut_lines = self.total_newlines - head_nl - tail_nl
        return Cut(
            head=self._head,
            tail=tail,
            cut_bytes=self.total_bytes - len(self._head) - len(tail),
            cut_lines=cut_lines,
            first_line=head_nl + 1,
            last_line=head_nl + cut_lines + (not clean),
        )

    def _split(self) -> None:
        whole = bytes(self._whole or b"")
        self._whole = None
        end = _head_end(whole, self.max_bytes // 2, self.max_lines // 2)
        self._head = whole[:end]
        self._tail_clean = end == 0 or whole[end - 1] == 0x0A
        self._push_tail(whole[end:])

    def _push_tail(self, data: bytes) -> None:
        budget = self._tail_max_bytes
        if len(data) > budget:
            # Bytes older than the last `budget` can never be shown: skip splitting them.
            self._tail.clear()
            self._tail_size = 0
            self._tail_clean = data[-budget - 1] == 0x0A
            data = data[-budget:]
        self._append_lines(data)
        self._trim()

    def _append_lines(self, data: bytes) -> None:
        parts = data.split(b"\n")
        lines = [part + b"\n" for part in parts[:-1]]
        if parts[-1]:
            lines.append(parts[-1])
        if lines and self._tail and not self._tail[-1].endswith(b"\n"):
            self._tail[-1] += lines[0]
            lines = lines[1:]
        self._tail.extend(lines)
        self._tail_size += len(data)

    def _trim(self) -> None:
        while len(self._tail) > self._tail_max_lines or self._tail_size > self._tail_max_bytes:
            first = self._tail[0]
            excess = self._tail_size - self._tail_max_bytes
            if len(self._tail) > self._tail_max_lines or len(first) <= excess:
                self._tail.popleft()
                self._tail_size -= len(first)
                self._tail_clean = first.endswith(b"\n")
            else:
                self._tail[0] = first[excess:]
                self._tail_size -= excess
                self._tail_clean = False


def _head_end(buf: bytes, max_bytes: int, max_lines: int) -> int:
    """Where the head stops: within both budgets, at a line end when one fits."""
    end = min(len(buf), max_bytes)
    pos = -1
    for _ in range(max_lines):
        pos = buf.find(b"\n", pos + 1, end)
        if pos < 0:
            break
    else:
        return pos + 1
    last = buf.rfind(b"\n", 0, end)
    if last >= 0:
        return last + 1
    # One line longer than the budget: cut it, but not inside a UTF-8 character.
    for _ in range(3):
        if 0 < end < len(buf) and buf[end] & 0xC0 == 0x80:
            end -= 1
    return end


def _continuation_run(data: bytes) -> int:
    """How many UTF-8 continuation bytes (at most 3) ``data`` starts with."""
    n = 0
    while n < min(3, len(data)) and data[n] & 0xC0 == 0x80:
        n += 1
    return n


class Sink(Protocol):
    def write(self, data: bytes, /) -> object: ...


class OutputCapture:
    """A child's output, streamed to a spill file, echoed, and kept within budgets.

    ``feed`` each read as it arrives, ``end`` each stream at EOF (or ``finish``
    them all), then ``render`` the text the model reads. A spill file that cannot be opened or written
    (a full disk: mmd/procs/spill.py) is given up, ``spill_error`` says why, and the output is read on:
    the model is told the whole was not kept, and why.
    """

    def __init__(
        self,
        spill: Sink | Callable[[], Sink] | None,
        *,
        max_bytes: int,
        max_lines: int,
        on_output: Callable[[str, str], None] | None = None,
    ) -> None:
        """*spill* is the spill file, or what opens it: then it is opened only once the output is cut
        (the bytes before are held until then; output within the budgets never touches the disk).

        Errors: ValueError if a budget is not positive.
        """
        self._spill: Sink | None = None
        self._open_spill: Callable[[], Sink] | None = None
        if callable(spill):
            self._open_spill = spill
        else:
            self._spill = spill
        self._held: list[bytes] = []
        self._spilled = 0  # bytes written to the spill file, MAX_SPILL_BYTES at most
        self.spill_full = False  # the output went on past MAX_SPILL_BYTES: its spill file holds the start
        self.spill_error: str | None = None  # why the spill file was given up (then it is not kept)
        self._view = HeadTail(max_bytes, max_lines)
        self._on_output = on_output
        # The bytes of each stream's unfinished last character, held for its next read (a stream that
        # printed nothing has no entry).
        self._pending: dict[str, bytes] = {}
        self._ended: set[str] = set()

    @property
    def total_bytes(self) -> int:
        return self._view.total_bytes

    @property
    def total_lines(self) -> int:
        return self._view.total_lines

    @property
    def truncated(self) -> bool:
        return self._view.truncated

    def feed(self, stream: str, data: bytes) -> None:
        """Take ``data`` read from ``stream`` (e.g. "stdout").

        Whole characters go to the spill file, the view and ``on_output``; the
        last bytes of an unfinished character wait for the next read.

        Errors: whatever ``on_output`` raises (an OSError of the spill file's gives the spill up).
        """
        self._decode(stream, data, final=False)

    def end(self, stream: str) -> None:
        """``stream`` reached EOF: an unfinished character is released as U+FFFD.

        Errors: as :meth:`feed`.
        """
        if stream not in self._ended:
            self._ended.add(stream)
            if stream in self._pending:  # else nothing was read: no character is unfinished
                self._decode(stream, b"", final=True)

    def finish(self) -> None:
        """End every stream not ended yet, e.g. after reads were abandoned."""
        for stream in list(self._pending):
            self.end(stream)

    def render(self, spill_name: str | None, lost: str | None = None) -> str:
        """The text the model reads: all of it, or head, a marker line, and tail.

        ``spill_name`` is where the marker says the whole output is; None says
        it was not kept, and *lost* (or ``spill_error``) why.
        """
        lost = lost or self.spill_error
        if lost is not None:
            spill_name = None
        view = self._view
        if not view.truncated:
            return printable(view.whole().decode("utf-8", "replace"))
        cut = view.cut()
        head = printable(cut.head.decode("utf-8", "replace"))
        if head and not head.endswith("\n"):
            head += "\n"
        tail = printable(cut.tail.decode("utf-8", "replace"))
        kept = self._spilled if self.spill_full else None
        return f"{head}{marker(cut, view.total_bytes, view.total_lines, spill_name, kept, lost)}\n{tail}"

    def _decode(self, stream: str, data: bytes, *, final: bool) -> None:
        # What codecs' incremental UTF-8 decoder does, without its three Python calls a read: the codec
        # decodes up to the last whole character (all of it when final) and says how far it read.
        held = self._pending.get(stream)
        raw = held + data if held else data
        text, used = _decode_utf8(raw, "replace", final)
        self._pending[stream] = raw[used:]
        self._release(stream, raw[:used], text)

    def _release(self, stream: str, raw: bytes, text: str) -> None:
        if raw:
            if self._spill is not None:
                self._write_spill(raw)
            elif self._open_spill is not None:
                self._held.append(raw)
            self._view.add(raw)
            if self._held and self._view.truncated:
                assert self._open_spill is not None
                try:
                    self._spill = self._open_spill()
                except OSError as exc:
                    self.spill_error = reason(exc)
                else:
                    for held in self._held:
                        self._write_spill(held)
                self._held, self._open_spill = [], None
        if text and self._on_output is not None:
            self._on_output(stream, printable(text))

    def _write_spill(self, raw: bytes) -> None:
        assert self._spill is not None
        if self.spill_full or self.spill_error is not None:
            return
        try:
            room = MAX_SPILL_BYTES - self._spilled
            if len(raw) <= room:
                self._spill.write(raw)
                self._spilled += len(raw)
                return
            self._spill.write(raw[:room])
            self._spilled, self.spill_full = MAX_SPILL_BYTES, True
            self._spill.write(
                f"\n[mm: the output went on past {MAX_SPILL_BYTES:,} bytes; the rest was not kept]\n".encode()
            )
        except OSError as exc:
            self.spill_error = reason(exc)


def marker(
    cut: Cut,
    total_bytes: int,
    total_lines: int,
    spill_name: str | None,
    kept: int | None = None,
    lost: str | None = None,
) -> str:
    """The line between head and tail: what was cut and where to read it (*kept*: the bytes of the spill file,
    when it holds only the start of the output; *lost*: why no file holds it)."""
    if cut.first_line == cut.last_line:
        lines = f"line {cut.first_line:,}"
    else:
        lines = f"lines {cut.first_line:,}–{cut.last_line:,}"
    if not spill_name:
        where = "the whole output was not kept" + (f" ({lost})" if lost else "")
    elif kept is not None:
        where = (
            f"the first {kept:,} bytes of the output ({total_bytes:,} bytes, {total_lines:,} lines) are in "
            f"{spill_name} — read any range of them with read_file"
        )
    else:
        where = (
            f"the whole output ({total_bytes:,} bytes, {total_lines:,} lines) is in {spill_name}"
            " — read any range of it with read_file"
        )
    return f"[... {cut.cut_bytes:,} bytes / {cut.cut_lines:,} lines cut ({lines}); {where} ...]"
