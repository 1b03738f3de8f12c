"""One live line on stderr while a scan, a trace or a rehearsal runs longer than a few seconds: what it is doing
(the phase: the forward pass, the backward pass, ...), how many ops it has recorded (or sent to the fallback) so
far, and the time elapsed. Drawn with rich.progress's columns; nothing at all with ``-q`` or where stderr is not a
terminal.

The program being traced prints too, on the same terminal. The line never goes into its stdout: it is written
to stderr only, erased before anything else is written to the terminal (the program's ``print``, a warning,
opaudit's own messages: sys.stdout and sys.stderr are guarded while it shows), and drawn again only once the
program's output has ended its line, so a line the program leaves open (``print(..., end="")``) is never drawn
over."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

DELAY = 2.0  # seconds of work before the line appears: a quick command shows nothing
REFRESH = 0.2  # seconds between two draws
ERASE = "\r\x1b[2K"


class _Guard:
    """sys.stdout or sys.stderr while the line shows: each write first erases the line; the stream it wraps does
    the rest (its buffering, encoding, fileno and isatty are the stream's own)."""

    def __init__(self, stream: TextIO, line: LiveLine):
        self._stream = stream
        self._line = line

    def write(self, text: str) -> int:
        with self._line.lock:
            self._line.erase()
            n = self._stream.write(text)
            if text:
                self._line.open_line = not text.endswith("\n")
            if self._line.open_line is False:
                self._stream.flush()  # what the program printed, before the line is drawn again
            return n

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class LiveLine:
    """``with LiveLine("trace train.py", enabled=...) as line:`` then ``line.ops(n)`` (the tracer's ``progress``
    callback), ``line.stage("the backward pass")`` (``on_stage``), or ``count=`` a function the drawing thread
    calls for the number to show."""

    def __init__(self, what: str, *, enabled: bool, unit: str = "ops", count: Callable[[], int | None] | None = None,
                 delay: float = DELAY, console: Console | None = None):
        self.enabled = enabled
        self.unit = unit
        self.count = count
        self.delay = delay
        self.lock = threading.RLock()
        self.open_line = False  # the program's last write left its line open: do not draw
        self._shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guarded: list[tuple[str, _Guard]] = []
        self._console = console  # where the line goes (tests give one); by default stderr as it is on entry
        self._what = what
        self._stage = ""
        self._ops = 0
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.fields[done]}"),
                             TimeElapsedColumn(), auto_refresh=False, disable=True)
        self._task = self._bar.add_task(what, done="")

    # -- what the work reports --------------------------------------------------------------------------
    def ops(self, n: int) -> None:
        self._ops = n

    def stage(self, name: str) -> None:
        self._stage = name

    # -- drawing -----------------------------------------------------------------------------------------
    def text(self, width: int) -> str:
        """The line as it is drawn now, at most ``width`` columns, with the terminal's colours."""
        n = self.count() if self.count is not None else self._ops
        parts = [self._what, *([self._stage] if self._stage else [])]
        done = f"{n:,} {self.unit}" if n is not None else ""
        self._bar.update(self._task, description=" · ".join(parts), done=done)
        assert self._console is not None
        buffer = io.StringIO()
        painter = Console(file=buffer, width=width, force_terminal=True, legacy_windows=False, emoji=False,
                          color_system="standard" if self._console.color_system else None)
        painter.print(self._bar.make_tasks_table(self._bar.tasks), end="", crop=True, no_wrap=True,
                      overflow="ellipsis", soft_wrap=False)
        return buffer.getvalue().split("\n", 1)[0]

    def erase(self) -> None:
        """Take the line off the terminal (under ``lock``)."""
        if self._shown:
            assert self._console is not None
            self._console.file.write(ERASE)
            self._console.file.flush()
            self._shown = False

    def draw(self) -> None:
        """Draw the line where the cursor is, unless the program left its line open (under ``lock``)."""
        assert self._console is not None
        if self.open_line:
            return
        file = self._console.file
        file.write("\r" + self.text(max(self._console.width - 1, 20)) + "\x1b[K")
        file.flush()
        self._shown = True

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        while not self._stop.is_set():
            with self.lock:
                try:
                    self.draw()
                except Exception:  # a display must never end the work it shows
                    return
            self._stop.wait(REFRESH)

    # -- lifetime ----------------------------------------------------------------------------------------
    def __enter__(self) -> LiveLine:
        if self._console is None:
            self._console = Console(file=sys.stderr, emoji=False)
            self.enabled = self.enabled and self._console.is_terminal and not self._console.is_dumb_terminal
        if not self.enabled:
            return self
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if name == "stderr" or _isatty(stream):  # stdout to a file or a pipe never meets the line
                guard = _Guard(stream, self)
                setattr(sys, name, guard)
                self._guarded.append((name, guard))
        self._thread = threading.Thread(target=self._run, name="opaudit-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        with self.lock:
            self.erase()
        for name, guard in self._guarded:
            if getattr(sys, name) is guard:  # the program may have put a stream of its own there
                setattr(sys, name, guard._stream)
        self._guarded = []
        self._thread = None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
