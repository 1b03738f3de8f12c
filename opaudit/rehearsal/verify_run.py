"""One run of ``fix --verify`` in a process of its own: ``python -m opaudit.rehearsal.verify_run SPEC.json``.

The parent (``opaudit.rehearsal.verify``) runs a program twice, each in a fresh interpreter (a process
simulates one device type, and the port's modules must not meet the original's in ``sys.modules``):

- ``target`` null: the original, on the CPU (CUDA absent: the parent hides every GPU), as ``python
  script ARGS`` would run it;
- ``target`` a vendor: the port, rehearsed on the target's simulated device with nothing mapped from
  ``cuda`` (``opaudit run --simulate T --no-map-cuda``), as on a machine with the vendor's plugin and no CUDA.

Both runs are seeded alike (torch, random, numpy) and watched the same way: the lines of the program's
own files that ran (a trace function that looks only at files under ``root``), the losses given to
``backward`` (a GradScaler's scaled loss counted unscaled), and the optimizer steps: the device types of
the parameters stepped and whether the first steps moved them. The result is written as JSON to ``out``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

MAX_LOSSES = 10_000
CHECKED_STEPS = 3  # optimizer steps whose parameters are compared before and after
CHECKED_PARAMS = 4  # parameters compared per step
_UNSEEN = object()


class _Watch:
    """What a run did: lines, losses, optimizer steps."""

    def __init__(self, root: str):
        self.root = os.path.realpath(root) + os.sep
        self.lines: dict[str, set[int]] = {}
        self._files: dict[str, Any] = {}  # a code object's file -> its set of lines, None: not the program's
        self.losses: list[float] = []
        self.steps = 0
        self.moved = 0  # checked steps that changed a parameter
        self.skipped = 0  # GradScaler.step calls that did not step the optimizer (inf or NaN gradients)
        self.scale: float | None = None  # the scale of the last step the scaler skipped
        self.param_devices: set[str] = set()
        self._before: dict[int, list[tuple[Any, Any]]] = {}
        self._scaled: dict[int, float] = {}

    # -- lines ------------------------------------------------------------------------------------------
    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        seen = self._files.get(name, _UNSEEN)
        if seen is _UNSEEN:
            real = os.path.realpath(name) if not name.startswith("<") else ""
            seen = self.lines.setdefault(real, set()) if real.startswith(self.root) else None
            self._files[name] = seen
        if seen is None:
            return None
        seen.add(frame.f_lineno)
        return self._local

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self._files[frame.f_code.co_filename].add(frame.f_lineno)  # type: ignore[union-attr]
        return self._local

    def start_lines(self) -> None:
        threading.settrace(self._global)
        sys.settrace(self._global)

    def stop_lines(self) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]

    # -- losses and steps -------------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        from opaudit.rehearsal.amp import scaler_classes

        watch = self
        backward = torch.Tensor.backward

        def scalar(t: Any) -> float | None:
            try:
                if isinstance(t, torch.Tensor) and t.numel() == 1:
                    return float(t.detach().float().cpu().reshape(()))
            except Exception:
                return None
            return None

        def watched_backward(self: Any, *args: Any, **kwargs: Any) -> Any:
            value = watch._scaled.pop(id(self), None)
            if value is None:
                value = scalar(self)
            if value is not None and len(watch.losses) < MAX_LOSSES:
                watch.losses.append(value)
            return backward(self, *args, **kwargs)

        def watching(scale: Any) -> Any:
            def watched_scale(self: Any, outputs: Any) -> Any:
                out = scale(self, outputs)
                value = scalar(outputs)
                if value is not None and isinstance(out, torch.Tensor):
                    watch._scaled[id(out)] = value  # backward on the scaled loss records the loss itself
                return out
            return watched_scale

        def stepping(step: Any) -> Any:
            def watched_step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
                before = watch.steps
                out = step(self, optimizer, *args, **kwargs)
                if watch.steps == before and self.is_enabled():  # found inf or NaN: the optimizer did not step
                    watch.skipped += 1
                    watch.scale = float(self.get_scale())
                return out
            return watched_step

        torch.Tensor.backward = watched_backward  # type: ignore[method-assign]
        for cls in scaler_classes():  # (torch < 2.3: CUDA's and the device's own, rehearsal/amp.py)
            cls.scale = watching(cls.scale)
            cls.step = stepping(cls.step)

        def pre(opt: Any, args: Any, kwargs: Any) -> None:
            if watch.steps >= CHECKED_STEPS:
                return
            params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None][:CHECKED_PARAMS]
            watch._before[id(opt)] = [(p, p.detach().to("cpu", copy=True)) for p in params]

        def post(opt: Any, args: Any, kwargs: Any) -> None:
            watch.steps += 1
            watch.param_devices |= {p.device.type for g in opt.param_groups for p in g["params"]}
            before = watch._before.pop(id(opt), None)
            if before and any(not torch.equal(old, p.detach().to("cpu")) for p, old in before):
                watch.moved += 1

        register_optimizer_step_pre_hook(pre)
        register_optimizer_step_post_hook(post)


def _seed() -> None:
    import random

    import torch

    random.seed(0)
    torch.manual_seed(0)
    try:
        import numpy

        numpy.random.seed(0)
    except ImportError:
        pass


def _under(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` ("" for ``root`` itself), None when outside it."""
    rel = os.path.relpath(path, root)
    return None if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel) else \
        ("" if rel == os.curdir else rel)


def isolate(spec: dict[str, Any], started_in: str) -> None:
    """The run's sys.path as ``python SCRIPT`` would have it, with nothing of the tree this run's copy was taken
    from: the folder ``-m`` put first (the one the process started in) dropped, and every folder of ``origin``
    (a ``.pth`` file's, an editable install's) moved to its place in the copy, ``root``. The reference run of
    ``fix --verify`` imports the original only, never the port being written in its place at the same time."""
    if sys.path and os.path.realpath(sys.path[0] or started_in) == os.path.realpath(started_in):
        del sys.path[0]
    origin, root = spec.get("origin"), spec["root"]
    if not origin:
        return
    origin = os.path.realpath(origin)

    def moved(entry: str) -> str:
        if not isinstance(entry, str) or not entry:
            return entry
        rel = _under(os.path.realpath(entry), origin)
        return entry if rel is None else os.path.join(root, rel) if rel else root

    sys.path[:] = [moved(p) for p in sys.path]
    for name, module in list(sys.modules.items()):  # setuptools' editable installs: {package: its folder}
        mapping = getattr(module, "MAPPING", None) if name.startswith("__editable__") else None
        if isinstance(mapping, dict):
            for key, value in list(mapping.items()):
                mapping[key] = moved(value)
    sys.path_importer_cache.clear()


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the program ``spec`` names; what it did, as JSON-able data."""
    from opaudit.errors import OpauditError, describe_exception, user_frames

    watch = _Watch(spec["root"])
    os.chdir(spec["cwd"])
    target = spec.get("target")
    script, argv = spec["script"], list(spec.get("argv", []))
    result: dict[str, Any] = {"target": target, "ok": False, "error": None, "details": None, "stats": None}
    if target is not None:
        from opaudit.rehearsal import native

        if native.wanted():
            native.load()
    import torch  # noqa: F401 (before the seed and the hooks)

    _seed()
    watch.install()
    try:
        watch.start_lines()
        try:
            if target is None:
                from opaudit.tracing.script import argv_and_path, locate, run_main

                path0, shown = locate(script, False)
                with argv_and_path([shown, *argv], path0):
                    run_main(shown, False)
            else:
                from opaudit.rehearsal.script import RunFailed, run_script

                try:
                    done = run_script(script, argv, simulate=target, map_cuda=False)
                    result["stats"] = done.stats.to_json()
                except RunFailed as e:
                    result["stats"] = e.stats.to_json()
                    raise
        finally:
            watch.stop_lines()
        result["ok"] = True
    except SystemExit as e:
        if e.code in (None, 0):
            result["ok"] = True
        else:
            result["error"] = f"{script} exited with status {e.code!r}"
    except OpauditError as e:
        result["error"] = e.message
        result["details"] = e.details
        result["hint"] = e.hint
    except BaseException as e:  # the user's program failed: what failed is the result
        result["error"] = describe_exception(e)
        result["details"] = user_frames(e)
    result.update(lines={f: sorted(s) for f, s in watch.lines.items() if s}, losses=watch.losses,
                  steps=watch.steps, moved=watch.moved, param_devices=sorted(watch.param_devices),
                  skipped=watch.skipped, scale=watch.scale)
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    isolate(spec, os.getcwd())
    result = run(spec)
    from opaudit.files import write_atomic

    write_atomic(spec["out"], json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the result is written: a thread the program left running must not keep the process


if __name__ == "__main__":
    main(sys.argv[1:])
