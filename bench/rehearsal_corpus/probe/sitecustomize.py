"""Training probe for bench/rehearsal_corpus.py: imported by Python at start-up (this folder is put on
PYTHONPATH) when OPAUDIT_CORPUS_PROBE names a JSON file to write; it installs itself once torch is imported.

It wraps ``torch.Tensor.backward``: at each backward of a one-element tensor it records the loss
(``item()``); at the first backward it finds the leaves the loss depends on (the trained parameters, by
walking the autograd graph) and copies them to the CPU, and at every later backward it copies them again,
so that the last copy holds every update but the last one. At exit it writes the losses, how far the
parameters moved (computed on those CPU copies only: the program's device may be gone by then) and how
often torch.save and torch.load were called.
With OPAUDIT_CORPUS_SEED set it seeds Python's, NumPy's and torch's generators first, for programs that
seed nothing themselves. The same probe runs in every run of a program (CPU reference, rehearsals, trace),
so the ops it adds (item, detach, a copy to the CPU) are the same in all of them.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys


def _install(out: str) -> None:
    import torch

    seed = os.environ.get("OPAUDIT_CORPUS_SEED")
    if seed is not None:
        import random

        random.seed(int(seed))
        torch.manual_seed(int(seed))
        try:
            import numpy

            numpy.random.seed(int(seed))
        except ImportError:
            pass

    state: dict = {"losses": [], "backwards": 0, "params": None, "first": None, "last": None, "device": None}
    original = torch.Tensor.backward

    def leaves(t: torch.Tensor) -> list[torch.Tensor]:
        found, seen, stack = [], set(), [t.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            var = getattr(fn, "variable", None)
            if isinstance(var, torch.Tensor):
                found.append(var)
            stack.extend(nxt for nxt, _ in fn.next_functions)
        return found

    def snapshot() -> list[torch.Tensor]:
        return [p.detach().to("cpu", copy=True) for p in state["params"]]

    def backward(self: torch.Tensor, *args, **kwargs):  # type: ignore[no-untyped-def]
        # Tensor.backward hands itself to a torch-function mode (the simulation's), which calls it again
        if state.get("inside"):
            return original(self, *args, **kwargs)
        state["inside"] = True
        try:
            if self.numel() == 1:
                state["losses"].append(float(self.item()))
            state["backwards"] += 1
            if state["params"] is None:
                state["params"] = leaves(self)
                state["device"] = str(state["params"][0].device) if state["params"] else None
                state["first"] = snapshot()
            else:
                state["last"] = snapshot()
        except Exception as e:  # the probe never changes what the program does
            state["error"] = f"{type(e).__name__}: {e}"
        try:
            return original(self, *args, **kwargs)
        finally:
            state["inside"] = False

    torch.Tensor.backward = backward  # type: ignore[method-assign]

    def counted(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            state[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    state["saves"] = state["loads"] = 0
    torch.save = counted("saves", torch.save)
    torch.load = counted("loads", torch.load)

    def write() -> None:
        first, last = state["first"], state["last"]
        moved = changed = None
        if first is not None and last is not None:
            diffs = [float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
                     for a, b in zip(first, last, strict=True)]
            moved = max(diffs, default=0.0)
            changed = sum(d > 0 for d in diffs)
        result = {"losses": state["losses"], "backwards": state["backwards"], "device": state["device"],
                  "param_tensors": len(state["params"] or []),
                  "param_elements": sum(p.numel() for p in first or []),
                  "changed_tensors": changed, "max_abs_change": moved, "saves": state["saves"],
                  "loads": state["loads"], "error": state.get("error")}
        with open(out, "w") as f:
            json.dump(result, f)

    atexit.register(write)


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Installs the probe once the program (or opaudit) has imported torch, not before: opaudit's command
    line loads its C++ stand-in for CUDA before torch is imported (opaudit.standin), which an import of
    torch at start-up would rule out."""

    def __init__(self, out: str):
        self.out = out

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        # a lookup alone (importlib.util.find_spec, as opaudit.standin makes) imports nothing: the finder stays
        # until torch's module runs
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, out = spec.loader, self.out
        run = loader.exec_module

        def exec_module(module):  # type: ignore[no-untyped-def]
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            run(module)
            _install(out)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("OPAUDIT_CORPUS_PROBE"):
    sys.meta_path.insert(0, _AfterTorch(os.environ["OPAUDIT_CORPUS_PROBE"]))
