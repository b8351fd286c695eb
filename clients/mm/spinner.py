"""A spinner on stderr while the model works: what it is doing, seconds since the turn began, tokens.

Only on a terminal: a spinner in a log or a pipe is noise. ``render.View`` stops it before it
prints anything and starts it again once it has printed what an event brought, so the spinner
only ever owns an empty line. A thread draws the frames: the client otherwise blocks in a
socket read while it waits for the daemon's next event.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, TextIO

from .terminal import is_terminal

# The frames, drawn in turn (braille dots, as many terminal tools use).
FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
# Seconds between frames; the first frame waits as long, so a quick stream of events never flickers.
INTERVAL = 0.1
# Events after which nothing runs any more, or a person is asked: no spinner then.
QUIET_AFTER = frozenset({"turn_ended", "consent_needed"})
DIM, RESET = "\033[2m", "\033[0m"


class Spinner:
    """Draws ``⠋ thinking… 3 s · 120 tokens · Ctrl-C to cancel`` on *stream* from ``start()`` to ``stop()``.

    Both may be called any number of times from the main thread; ``stop()`` returns once the
    line is clear, so whatever is printed next starts at the beginning of an empty line.
    """

    def __init__(self, stream: TextIO, *, enabled: bool | None = None, color: bool = False) -> None:
        self.stream = stream
        self.enabled = is_terminal(stream) if enabled is None else enabled
        self.color = color
        self.began = time.monotonic()  # elapsed seconds count from here: the turn's start
        self.tokens = 0  # output tokens of the model steps so far, as the model server counted them
        self.doing = "thinking"
        self._lock = threading.Lock()  # one writer at a time: a frame, or the clearing of the line
        self._stop: threading.Event | None = None  # set: the running thread's frames must end
        self._drawn = False  # a frame is on the line
        self._tool: str | None = None  # the tool running now: from its tool_call to its tool_result

    def start(self, doing: str = "thinking") -> None:
        """Show the spinner (a no-op when it runs already, but for the label) — on a terminal only."""
        self.doing = doing
        if not self.enabled or self._stop is not None:
            return
        self._stop = threading.Event()
        # The thread starts with SIGINT blocked. Blocked only by its own first line, a thread not yet
        # scheduled could take the terminal's Ctrl-C: the main thread, waiting in a read (a consent
        # question), then never woke, in about 1 run in 8 on a loaded machine.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            threading.Thread(target=self._run, args=(self._stop,), name="mm-spinner", daemon=True).start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def stop(self) -> None:
        """Stop drawing and clear the line the spinner used."""
        if self._stop is None:
            return
        with self._lock:
            self._stop.set()
            self._stop = None
            if self._drawn:
                self._write("\r\033[K")
                self._drawn = False

    def after(self, ev: dict[str, Any], *, line_free: bool) -> None:
        """Start again after *ev* was shown, unless the turn ended, a person is asked, or a line is open."""
        kind, data = ev["kind"], ev["data"]
        if kind == "assistant":
            self.tokens += (data.get("usage") or {}).get("output") or 0
        elif kind == "tool_call":
            self._tool = data.get("name")
        elif kind == "tool_result":
            self._tool = None
        if kind in QUIET_AFTER or not line_free:
            return
        self.start(f"running {self._tool}" if self._tool else "thinking")

    def frame(self, now: float, n: int) -> str:
        """The text of frame *n* at time *now*, cut to the terminal's width."""
        parts = [f"{FRAMES[n % len(FRAMES)]} {self.doing}… {int(now - self.began)} s"]
        if self.tokens:
            parts.append(f"{self.tokens:,} tokens")
        parts.append("Ctrl-C to cancel")
        text = " · ".join(parts)[: max(10, self._columns() - 1)]
        return f"{DIM}{text}{RESET}" if self.color else text

    def _columns(self) -> int:
        # os, not shutil: shutil would load the compression modules into every mm -p
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):  # no file descriptor, or no terminal
            return 80

    def _run(self, stop: threading.Event) -> None:
        # SIGINT is blocked here from the start (see start()): Ctrl-C must reach the main thread, which
        # a read holds until a signal is sent to it.
        n = 0
        while not stop.wait(INTERVAL):
            with self._lock:
                if stop.is_set():
                    return
                self._write("\r" + self.frame(time.monotonic(), n) + "\033[K")
                self._drawn = True
            n += 1

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: nothing to draw on
            pass
