"""The device a trace runs on: CUDA, simulated on the CPU (the default), or the CPU itself.

On a machine without a GPU, code written for CUDA takes its CPU branch (``torch.cuda.is_available()`` is
False, ``device='cuda'`` fails), and so does what PyTorch picks per device (autocast, fused and foreach
optimizers, GradScaler). To trace the path a CUDA user's run takes, the code runs on the rehearsal's
simulated device (opaudit.fallback.simulator) with ``cuda`` as its target: ``cuda`` is mapped onto the
stand-in device (``cudasim``), ``torch.cuda`` answers as a device module, and every op on device tensors
runs on the CPU data. Ops on tensors that stay on the CPU are recorded too, as ``host`` records.

A process simulates one device type (PrivateUse1 is renamed once): where it is taken (a vendor plugin is
imported), the trace says so and ``--device cpu`` traces the CPU path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from opaudit.errors import InputError

if TYPE_CHECKING:
    from opaudit.fallback.simulator import Simulator
    from opaudit.standin import StandIn

DEVICES = ("cuda", "cpu")


def cuda_target() -> str:
    """The CUDA release of the installed torch in coverage_db (its kernels are what a GPU build has), else
    the newest."""
    from opaudit.matrix import load_matrix

    version = torch.__version__.split("+")[0]
    major_minor = ".".join(version.split(".")[:2])
    for candidate in (f"cuda@{version}", f"cuda@{major_minor}"):
        try:
            return load_matrix(candidate).release.key
        except InputError:
            continue
    return load_matrix("cuda").release.key


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise InputError(f"device must be one of {', '.join(DEVICES)}, not {device!r}",
                         hint="cuda (the default) runs the code on a simulated CUDA device; cpu on the CPU")


@contextmanager
def on_device(device: str) -> Iterator[Simulator | StandIn | None]:
    """Run the body on ``device``: ``cuda`` is simulated (module doc), ``cpu`` is the CPU as it is."""
    check_device(device)
    if device == "cpu":
        yield None
        return
    from opaudit import standin

    if standin.active():  # loaded before torch (the command line): real CUDA tensors (standin's doc)
        yield standin.install()
        return
    from opaudit.fallback.simulator import Simulator

    taken = torch._C._get_privateuse1_backend_name()
    if taken not in ("privateuseone", "cudasim"):
        raise InputError(f"this process already has a {taken!r} device, so CUDA cannot be simulated in it",
                         hint="trace in a process of its own, or trace the CPU path with --device cpu")
    with Simulator(cuda_target(), map_devices=("cuda",)) as sim:
        yield sim


def simulated_meta(sim: Simulator | StandIn | None) -> dict[str, Any] | None:
    """What TraceMeta.simulated records of a simulation: the CUDA release, the device's name, and the engine
    (``stand-in``: opaudit.standin's C++ device; ``simulator``: the rehearsal's simulated device)."""
    if sim is None:
        return None
    return {"target": sim.target, "name": sim.name, "engine": getattr(sim, "engine", "simulator")}


def bridged_calls() -> dict[tuple[str, str], int]:
    """{(op, dtype): calls} that this process's device over host memory (the CUDA stand-in, or the rehearsal's C++
    device) ran wide because the CPU kernel refuses the dtype CUDA runs (opaudit/native/dtype_bridge.h)."""
    from opaudit import standin

    rows = standin.bridged()
    if not rows:
        from opaudit.fallback import native

        rows = [tuple(r) for r in native.ext.bridged()] if native.ext is not None else []
    return {(op, _C10_DTYPES.get(dtype, dtype)): n for op, dtype, n in rows}


# c10's names of the dtypes (ScalarType) as torch names them
_C10_DTYPES = {"Half": "float16", "BFloat16": "bfloat16", "Float": "float32", "Double": "float64",
               "ComplexHalf": "complex32", "ComplexFloat": "complex64", "ComplexDouble": "complex128",
               "Byte": "uint8", "Char": "int8", "Short": "int16", "Int": "int32", "Long": "int64", "Bool": "bool"}


def bridged_since(before: dict[tuple[str, str], int]) -> dict[str, dict[str, int]]:
    """What TraceMeta.simulated["bridged"] records: {op: {dtype: calls}} run wide since ``before``."""
    out: dict[str, dict[str, int]] = {}
    for (op, dtype), n in sorted(bridged_calls().items()):
        if n > before.get((op, dtype), 0):
            out.setdefault(op, {})[dtype] = n - before.get((op, dtype), 0)
    return out
