"""The progress line of scan, trace and run (opaudit/cli/progress.py): on a terminal's stderr while the work runs
longer than a few seconds, never in the program's stdout, never drawn over the program's own output, off with -q.

The command line runs under a pseudo-terminal (pty); the line's own logic runs in-process on a console that
is told it is a terminal."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import FIXTURES, ROOT
from rich.console import Console

from opaudit.cli.progress import ERASE, LiveLine

SCRIPT = str(FIXTURES / "scripts" / "slow_steps.py")
PROGRAM = ["step 0", "step 1", "step 2", "step 3", "step 4", "no newline yet done"]


def _on_a_terminal(args: list[str], *, stdout_too: bool) -> tuple[int, str, str]:
    """``opaudit ARGS`` with stderr (and, with ``stdout_too``, stdout) on a pseudo-terminal; stdout otherwise a
    pipe: exit code, stdout (empty with ``stdout_too``), what the terminal received."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "opaudit", *args], stdin=subprocess.DEVNULL,
                            stdout=slave if stdout_too else subprocess.PIPE, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout is not None else ""
    return proc.wait(timeout=300), out, b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[int, str, str]]:
    """The three command lines at once (they mostly sleep): a trace and a rehearsal with stdout to a pipe, and a
    quiet rehearsal with stdout and stderr on the same terminal."""
    calls = {
        "trace": (["trace", "--no-audit", "--", SCRIPT], False),
        "run": (["run", "--simulate", "ascend", "--", SCRIPT], False),
        "run -q": (["run", "--simulate", "ascend", "-q", "--", SCRIPT], True),
    }
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {k: pool.submit(_on_a_terminal, args, stdout_too=both) for k, (args, both) in calls.items()}
        return {k: f.result() for k, f in futures.items()}


def _drawn(tty: str) -> list[str]:
    """The progress lines drawn on the terminal, without colours."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", tty)
    return re.findall(r"\r([^\r\n\x1b]*)\x1b\[K", plain)


def test_a_trace_shows_its_ops_and_time_on_the_terminal_and_none_in_stdout(runs):
    code, out, tty = runs["trace"]
    assert code == 0, tty[-2000:]
    assert out.splitlines()[:6] == PROGRAM  # the program's stdout, as it printed it
    assert "\x1b" not in out and "slow_steps.py ·" not in out
    drawn = _drawn(tty)
    assert drawn, tty[-2000:]
    assert all(re.search(r"trace \S*slow_steps\.py .*\d+ ops \d:\d\d:\d\d$", line.strip()) for line in drawn), drawn
    assert tty.rstrip().endswith(ERASE)  # taken off the terminal when the work ended


def test_a_rehearsal_counts_the_calls_sent_to_the_fallback(runs):
    code, out, tty = runs["run"]
    assert code == 0, tty[-2000:]
    assert out.splitlines()[:6] == PROGRAM
    counts = [int(m.group(1).replace(",", "")) for line in _drawn(tty)
              if (m := re.search(r"on ascend \(simulated\) (\d[\d,]*) calls on the fallback", line))]
    assert counts and counts == sorted(counts) and counts[-1] >= 1, _drawn(tty)  # the GRU cell's backward


def test_quiet_shows_no_progress_and_the_programs_lines_stay_whole(runs):
    code, _, tty = runs["run -q"]
    assert code == 0, tty[-2000:]
    assert not _drawn(tty) and "calls on the fallback" not in tty
    lines = [line.strip() for line in tty.replace("\r\n", "\n").split("\n")]
    assert lines[:6] == PROGRAM, lines


# -- the line itself ---------------------------------------------------------------------------------------


def _terminal() -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, width=80, color_system=None), screen


def test_the_line_shows_the_stage_the_count_and_the_time():
    console, screen = _terminal()
    with LiveLine("scan model.py", enabled=True, console=console, delay=60) as line:
        line.stage("the backward pass")
        line.ops(12_288)
        text = line.text(80)
    assert re.fullmatch(r". scan model\.py · the backward pass 12,288 ops 0:00:0\d", text.strip()), text
    assert screen.getvalue() == ""  # gone before the delay: never drawn


def test_writes_erase_the_line_and_an_open_line_is_not_drawn_over(capsys):
    console, screen = _terminal()
    with LiveLine("trace s.py", enabled=True, console=console, delay=60) as line:
        assert sys.stderr is not sys.__stderr__ and type(sys.stderr).__name__ == "_Guard"
        with line.lock:
            line.draw()
        assert screen.getvalue().startswith("\r") and "trace s.py" in screen.getvalue()
        sys.stderr.write("epoch 1 ")  # the program's line, left open
        assert screen.getvalue().endswith(ERASE)
        with line.lock:
            line.draw()
        assert screen.getvalue().endswith(ERASE)  # not drawn over the open line
        sys.stderr.write("done\n")
        with line.lock:
            line.draw()
        assert screen.getvalue().endswith("\x1b[K") and screen.getvalue().count(ERASE) == 1
    assert type(sys.stderr).__name__ != "_Guard"  # the streams are the program's again
    assert screen.getvalue().endswith(ERASE)
    assert capsys.readouterr().err == "epoch 1 done\n"  # what the program wrote, and nothing else


def test_off_it_draws_nothing_and_guards_nothing():
    console, screen = _terminal()
    stderr = sys.stderr
    with LiveLine("trace s.py", enabled=False, console=console, delay=0) as line:
        assert sys.stderr is stderr
        line.ops(5)
    assert screen.getvalue() == ""
    # and where stderr is no terminal (here: pytest's capture), it is off whatever was asked
    with LiveLine("trace s.py", enabled=True, delay=0) as line:
        assert not line.enabled and sys.stderr is stderr


def test_the_tracer_says_each_stage_it_enters():
    """scan's line shows the stage from opaudit.trace's on_stage: a train step's, in order."""
    import torch

    import opaudit

    stages: list[str] = []
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    opaudit.trace(model, torch.randn(2, 4), train=True, on_stage=stages.append)
    assert stages == ["creating the optimizer", "the forward pass", "the loss", "the backward pass",
                      "the optimizer step", "the optimizer step"]  # the optimizer steps twice (its first sets up)
