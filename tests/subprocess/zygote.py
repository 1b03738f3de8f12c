"""The test helpers' warm start for ``python -m opaudit`` (tests/helpers.py, run_cli): a process that has imported
torch and nothing of opaudit's, and forks a child for each command it is sent. With ``--cuda``, for the CUDA path of
scan and trace, it has first loaded opaudit's C++ stand-in for CUDA (opaudit.standin.prepare), as those commands
do before they import torch, and says so; a child's own prepare() then finds it in place.

A fresh interpreter spends about 1.3 s of CPU importing torch, most of a short command's time; the suite runs
commands in a fresh process some 200 times. A child of this process starts where a fresh process would be once
``import torch`` returned, and from there runs what ``python -m opaudit ARGS`` runs, in the call's environment,
working folder and streams: ``opaudit`` imported from nothing, the command's exit code (or the signal that ended it)
that of the process, atexit handlers and buffers finished by a normal interpreter exit.

Protocol, one JSON object per line. First, out: ``{"ready": true}`` (or ``{"declined": why}`` where the stand-in
cannot be loaded: the process ends). In, on stdin: ``{"argv": [...], "env": {...}, "cwd": "...", "stdout": path,
"stderr": path, "timeout": seconds}``. Out, on stdout: ``{"returncode": n}`` or ``{"timeout": true}`` (the child
killed, as subprocess.run's timeout does). helpers.run_cli sends only the calls whose start a warm process does not
change (helpers.warm_key).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys

if sys.argv[1:] == ["--cuda"]:  # the CUDA path of scan and trace: the C++ stand-in loaded before torch, as they do
    from opaudit import standin

    _why = standin.prepare()
    if _why is not None:
        print(json.dumps({"declined": _why}), flush=True)
        sys.exit(0)
import torch  # noqa: E402, F401 - the point of this process

print(json.dumps({"ready": True}), flush=True)

# what the children start from: this interpreter's path without this file's folder and the PYTHONPATH it was given
# (a child puts its own call's in front, as a fresh `python -m` does)
_OWN = {os.path.abspath(p) for p in (os.path.dirname(__file__), *os.environ.get("PYTHONPATH", "").split(os.pathsep))
        if p}
BASE_PATH = [p for p in sys.path if p and os.path.abspath(p) not in _OWN]


def child(request: dict) -> int:
    """In the forked child: become the call's process, then run opaudit's entry point; its exit code."""
    os.setpgid(0, 0)  # its own group: a timeout ends it and whatever it started
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                           (2, request["stderr"], os.O_WRONLY)):
        opened = os.open(path, mode)
        os.dup2(opened, fd)
        os.close(opened)
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *BASE_PATH]  # `python -m`: the working folder first, then PYTHONPATH
    sys.argv = ["-m", *request["argv"]]
    import runpy

    try:
        runpy.run_module("opaudit", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    return 0


def wait(pid: int, timeout: float) -> dict:
    """The child's exit code as subprocess reports it (minus the signal that ended it), or, past ``timeout``
    seconds, the child and its group killed."""
    handle = os.pidfd_open(pid)
    try:
        if not select.select([handle], [], [], timeout)[0]:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timeout": True}
        return {"returncode": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}
    finally:
        os.close(handle)


def serve() -> int | None:
    """Answer requests until stdin closes (None), or, in a child, the child's exit code."""
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return child(request)
        try:
            os.setpgid(pid, pid)  # (the child does it too: whichever runs first)
        except OSError:
            pass
        answer = wait(pid, request["timeout"])
        print(json.dumps(answer), flush=True)
    return None


if __name__ == "__main__":
    code = serve()
    if code is not None:
        sys.exit(code)
