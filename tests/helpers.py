"""Paths and helpers shared by the test folders (importable from any of them: tests/ is on sys.path).

Test modules import these from here, never from a conftest: each folder has its own conftest.py, and
pytest registers them all under the one module name."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# programs the tests run in a fresh process (a process simulates one device type; an import's effects are
# checked where nothing was imported before): real files, which the linters check like any other
SUBPROCESS = Path(__file__).resolve().parent / "subprocess"

# The zoo's test set (tests/conftest.py's `tiny_zoo` runs it once): two tiny transformers models and a misspelt one.
TINY_ZOO = ["hf:gpt2?n_layer=1&n_embd=32&n_head=2",
            "hf:bert?num_hidden_layers=1&hidden_size=32&num_attention_heads=2&intermediate_size=64",
            "hf:lama"]
TINY_ZOO_TARGETS = ["ascend", "mps@2.3.0", "musa@1.2.1", "xpu"]


def rehearsed_ops(tmp_path: Path, name: str, source: str, target: str = "ascend") -> list[dict]:
    """``source`` written to ``tmp_path/name`` and run under ``opaudit run --simulate target --stats``, through the
    real command line: the per-op statistics of the rehearsal."""
    import json

    script, stats = tmp_path / name, tmp_path / "stats.json"
    script.write_text(source)
    rc, _, stderr = run_cli("run", "--simulate", target, "--stats", str(stats), "--", str(script), cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    return json.loads(stats.read_text())["ops"]


# Commands that touch no device and leave no state behind in the process (no torch device, no PrivateUse1 rename,
# no patched torch): run_cli runs them in this process, through the same entry point as `python -m opaudit`,
# which saves a fresh interpreter's imports per call. Every other command runs in a fresh process.
IN_PROCESS = frozenset({"lint", "fix", "rules", "explain", "matrix"})


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None,
            fresh: bool = False):
    """The real command line: exit code, stdout, stderr. In a fresh process, or for the commands of IN_PROCESS
    (unless ``fresh``) in this one, with the same environment, working folder and streams as a fresh process."""
    if not fresh and args and args[0] in IN_PROCESS and "--jobs" not in args:
        return _run_cli_here(list(args), cwd=cwd or ROOT, env={"COLUMNS": "200", **(env or {})})
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    key = None if fresh else warm_key(list(args), full_env)
    proc = _warm_process(key) if key else None
    if proc is not None:
        return _run_cli_warm(proc, list(args), cwd=cwd or ROOT, env=full_env, timeout=timeout)
    proc = subprocess.run([sys.executable, "-m", "opaudit", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout, proc.stderr


# The warm start (tests/subprocess/zygote.py): a process of this worker's that has imported torch forks a child
# per command, which runs `python -m opaudit ARGS` from there. For the CUDA path of scan and trace, another has
# also loaded the C++ stand-in before torch, as those commands do (opaudit.standin). Only for a call whose
# environment agrees with this worker's on everything an interpreter, torch or the stand-in reads as it starts; a
# warm process starts in the worker's environment as it is then (a test that changed it gets one of its own, up to
# MAX_WARM per worker). Every other call, `fresh=True`, and OPAUDIT_TEST_WARM=0 run a fresh interpreter as before.
WARM_COMMANDS = frozenset({"run", "report", "scan", "trace"})
_READ_AT_START = ("PYTHON", "TORCH", "OMP_", "MKL_", "KMP_", "LD_", "CUDA", "PYTORCH", "MALLOC", "CXX",
                  "OPAUDIT_CUDA_STAND_IN", "OPAUDIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME")
MAX_WARM = 4
_warm: dict = {}  # warm_key -> the warm process, or None where it declined (the stand-in cannot load)


def warm_key(args: list[str], env: dict[str, str]) -> tuple | None:
    """Which warm process can start ``python -m opaudit ARGS`` in ``env`` as a fresh one would: (its kind, "torch"
    (torch imported) or "cuda" (the stand-in, then torch), and the values it starts with), or None (a fresh
    interpreter)."""
    if os.environ.get("OPAUDIT_TEST_WARM") == "0" or sys.platform != "linux" or not args:
        return None
    command, options = args[0], args[1:args.index("--")] if "--" in args else args[1:]
    if command not in WARM_COMMANDS:
        return None
    kind = "torch"
    if command in ("scan", "trace"):
        devices = [options[i + 1] for i, a in enumerate(options[:-1]) if a == "--device"] + \
            [a.split("=", 1)[1] for a in options if a.startswith("--device=")]
        kind = "cuda" if not devices or "cuda" in devices else "torch"
    start = _start_values(env)
    if start != _start_values(os.environ):  # a call's own such values (a test's cache folder...): a fresh start
        return None
    key = (kind, start)
    if key in _warm and _warm[key] is None or key not in _warm and len(_warm) >= MAX_WARM:
        return None
    return key


def _start_values(env: Mapping[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_READ_AT_START) and k != "PYTHONPATH"))


def _warm_process(key: tuple) -> subprocess.Popen | None:
    """The warm process of ``key`` (warm_key), started on first use; None where it declined."""
    proc = _warm.get(key)
    if proc is not None and proc.poll() is None:
        return proc
    kind = key[0]  # (its start values are this worker's: warm_key)
    proc = subprocess.Popen([sys.executable, str(SUBPROCESS / "zygote.py"), *(["--cuda"] if kind == "cuda" else [])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=dict(os.environ))
    assert proc.stdout is not None
    if "ready" not in json.loads(proc.stdout.readline() or "{}"):
        proc.wait()
        _warm[key] = None
        return None
    _warm[key] = proc
    atexit.register(_end_warm, proc)
    return proc


def _end_warm(proc: subprocess.Popen) -> None:
    """At the worker's exit: the warm process's stdin closed, which ends it, and waited for."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _run_cli_warm(proc: subprocess.Popen, argv: list[str], *, cwd: Path, env: dict[str, str],
                  timeout: float) -> tuple[int, str, str]:
    """run_cli's fresh process, forked from the warm one: exit code, stdout, stderr."""
    with tempfile.TemporaryDirectory(prefix="opaudit-warm-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        request = {"argv": argv, "env": env, "cwd": str(cwd), "stdout": str(out), "stderr": str(err),
                   "timeout": timeout}
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline() or '{"lost": true}')
        stdout = out.read_text(encoding="utf-8", errors="replace")
        stderr = err.read_text(encoding="utf-8", errors="replace")
    if answer.get("timeout"):
        raise subprocess.TimeoutExpired([sys.executable, "-m", "opaudit", *argv], timeout, stdout, stderr)
    if "returncode" not in answer:
        raise RuntimeError(f"the warm process (tests/subprocess/zygote.py) ended: {proc.wait()}")
    return answer["returncode"], stdout, stderr


def _run_cli_here(argv: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """opaudit.cli.main(argv) in this process: its exit code, and what it wrote to stdout and stderr."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from opaudit.cli import console, main

    saved_env = {k: os.environ.get(k) for k in env}
    # the consoles read COLUMNS when they are made (once per process): given the call's, as a fresh process would
    widths = (console.out._width, console.err._width)
    console.out._width = console.err._width = int(env["COLUMNS"])
    saved_cwd = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main(argv)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if e.code is not None and not isinstance(e.code, int):
                    print(e.code, file=sys.stderr)
    finally:
        console.out._width, console.err._width = widths
        os.chdir(saved_cwd)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


def run_python(script: str, *args: str, cwd: Path | None = None, env: dict | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """``python tests/subprocess/SCRIPT ARGS`` in a fresh process (``env`` added to this one's): its exit code,
    stdout and stderr."""
    return subprocess.run([sys.executable, str(SUBPROCESS / script), *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, env={**os.environ, **(env or {})})


@contextmanager
def recorder_engine(name: str) -> Iterator[None]:
    """Record with the tracer's ``native`` (C++) or ``python`` engine while the body runs (opaudit.tracing.native)."""
    from opaudit.tracing import native

    before = os.environ.get(native.ENV_ENGINE)
    os.environ[native.ENV_ENGINE] = name
    try:
        yield
    finally:
        if before is None:
            del os.environ[native.ENV_ENGINE]
        else:
            os.environ[native.ENV_ENGINE] = before


# the browser tests (a real headless Chromium, driven by Playwright: the `browser` fixture of tests/conftest.py)
CHROMIUM = os.environ.get("OPAUDIT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = "no Chromium on PATH (apt-get install chromium; .ci/run does)"


def open_page(browser, path: Path, ready: str, width: int = 1400, height: int = 1000):
    """``path`` in a new page of ``width`` x ``height``, once ``ready`` (a selector) shows: the page, and the events
    it gave (console messages and page errors, requests, dialogs, which are dismissed)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    events: dict[str, list[str]] = {"console": [], "requests": [], "dialogs": []}
    page.on("console", lambda m: events["console"].append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: events["console"].append(f"pageerror: {e}"))
    page.on("request", lambda r: events["requests"].append(r.url))
    page.on("dialog", lambda d: (events["dialogs"].append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    page.wait_for_selector(ready)
    return page, events
