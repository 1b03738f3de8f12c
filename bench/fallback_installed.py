"""The installed fallback's cost per op call, against the same op implemented natively on the device.

    python bench/fallback_installed.py [--rounds 9] [--sizes 1e3,1e5,1e6] [--threads 1]
                                       [--out bench/results/fallback_installed.json]

On the C++ test backend (tests/fixtures/plugins/testdev, compiled on first use, registered as "npu"):
for common ops (relu, sigmoid.out, gelu.out, _log_softmax.out, sum.IntList_out, addmm.out, and mul/add
through their .out variants, which testdev has in C++ and ``force_cpu`` sends through the fallback) at a
few tensor sizes (elements), the time per call of the op through ``opaudit.fallback.install("ascend")``
against testdev's C++ kernel for it (``enable_native``: the CPU kernel on the device's memory, no copy).
Each round times every op both ways, alternating which goes first; a time is the mean over a block of
calls of >= 20 ms, and the ratio is the median over rounds of fallback / native.

Goal: a CPU round trip costs at most ~2 copies of the data plus the CPU kernel:
fallback <= native + 2 x copy, where copy is the time of one device -> host copy (``.to("cpu")``) of the
bytes the op reads and writes, measured in the same round. It is judged where per-call costs no longer
dominate (the largest size); smaller sizes show the fixed cost of a Python kernel. An op the fallback
decomposes would be reported, not judged; on this minimal backend none is (relu's decomposition needs
le and where, which it lacks too, so relu takes one round trip: Chooser.confirm).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "plugins"))

import testdev  # noqa: E402

DEV = "npu"
BLOCK_S = 0.02
# testdev has these in C++: the fallback side sends them to the CPU with force_cpu
BUILT_IN = {"add.out", "mul.out"}


def cases(n: int) -> dict[str, tuple[Callable[[], torch.Tensor], list[torch.Tensor]]]:
    """op -> (a call of it on device tensors of ~n elements, the tensors it reads)."""
    torch.manual_seed(0)
    x, y = torch.randn(n, device="cpu").to(DEV), torch.randn(n, device="cpu").to(DEV)
    cols = min(n, 1000)
    rows2d = x.view(n // cols, cols) if n % cols == 0 else x[: (n // cols) * cols].view(-1, cols)
    side = max(int(round(n ** 0.5)), 1)
    a, b = torch.randn(side, side).to(DEV), torch.randn(side, side).to(DEV)
    bias = torch.randn(side).to(DEV)
    return {
        "relu": (lambda: torch.relu(x), [x]),
        "sigmoid.out": (lambda: torch.sigmoid(x), [x]),
        "gelu.out": (lambda: torch.nn.functional.gelu(x), [x]),
        "_log_softmax.out": (lambda: torch.log_softmax(rows2d, dim=1), [rows2d]),
        "sum.IntList_out": (lambda: rows2d.sum(dim=1), [rows2d]),
        "addmm.out": (lambda: torch.addmm(bias, a, b), [bias, a, b]),
        "mul.out": (lambda: x * y, [x, y]),
        "add.out": (lambda: x + y, [x, y]),
    }


def block(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call, the mean over ``calls`` calls."""
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def calibrate(fn: Callable[[], object]) -> int:
    """Calls per block: enough for BLOCK_S, at least 3 (after a warm-up call)."""
    fn()
    one = block(fn, 1)
    return max(3, int(BLOCK_S / max(one, 1e-7)))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--sizes", default="1e3,1e5,1e6", help="tensor sizes in elements, comma-separated")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "fallback_installed.json"))
    args = ap.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    torch.set_num_threads(args.threads)
    ext = testdev.register(DEV)
    install = importlib.import_module("opaudit.fallback.live").install  # the function, not the module

    work = {n: cases(n) for n in sizes}
    ops = list(work[sizes[0]])
    data: dict[tuple[str, int], int] = {}  # bytes the op reads and writes
    times: dict[tuple[str, int, str], list[float]] = {}
    copies: dict[tuple[str, int], list[float]] = {}
    paths: dict[tuple[str, int], list[tuple[str, str]]] = {}  # (op, path) of every fallback call of one call
    moved: dict[tuple[str, int], int] = {}
    calls: dict[tuple[str, int, str], int] = {}  # calls per timed block, fixed in the warm-up round

    def run_fallback(op: str) -> None:
        with install("ascend", force_cpu=[op] if op in BUILT_IN else []) as inst:
            for n in sizes:
                fn, reads = work[n][op]
                before = {k: (s.calls, s.to_host + s.to_device) for k, s in inst.stats.ops.items()}
                out = fn()  # one call, counted: the paths and bytes of one call
                data[(op, n)] = nbytes(reads) + nbytes([out])
                paths[(op, n)] = sorted(k for k, s in inst.stats.ops.items() if s.calls > before.get(k, (0, 0))[0])
                moved[(op, n)] = sum(s.to_host + s.to_device - before.get(k, (0, 0))[1]
                                     for k, s in inst.stats.ops.items())
                c = calls.setdefault((op, n, "fallback"), calibrate(fn))
                times.setdefault((op, n, "fallback"), []).append(block(fn, c))

    def run_native(op: str) -> None:
        added = [] if op in BUILT_IN else ext.enable_native([op])
        try:
            for n in sizes:
                fn = work[n][op][0]
                c = calls.setdefault((op, n, "native"), calibrate(fn))
                times.setdefault((op, n, "native"), []).append(block(fn, c))
        finally:
            if added:
                ext.disable_native()

    def run_copy(op: str) -> None:
        for n in sizes:
            buf = torch.empty(data[(op, n)] // 4, dtype=torch.float32).to(DEV)
            c = calls.setdefault((op, n, "copy"), calibrate(lambda buf=buf: buf.to("cpu")))
            copies.setdefault((op, n), []).append(block(lambda buf=buf: buf.to("cpu"), c))

    for r in range(args.rounds + 1):  # round 0 warms up (imports, decomposition tables, allocator)
        for op in ops:
            first, second = (run_fallback, run_native) if r % 2 == 0 else (run_native, run_fallback)
            first(op)
            second(op)
            run_copy(op)
        if r == 0:
            times.clear()
            copies.clear()

    results = []
    for op in ops:
        for n in sizes:
            fb, nat = times[(op, n, "fallback")], times[(op, n, "native")]
            ratio = statistics.median(f / m for f, m in zip(fb, nat, strict=True))
            cp = statistics.median(copies[(op, n)])
            f_us, n_us, c_us = statistics.median(fb) * 1e6, statistics.median(nat) * 1e6, cp * 1e6
            called = paths[(op, n)]
            judged = called == [(op, "cpu")] and n == max(sizes)  # one plain round trip
            row = {"op": op, "elements": n, "native_us": round(n_us, 1), "fallback_us": round(f_us, 1),
                   "ratio": round(ratio, 2), "path": "+".join(p for o, p in called if o == op),
                   "fallback_calls": [f"{o} ({p})" for o, p in called],
                   "bytes": data[(op, n)], "bytes_moved": moved[(op, n)],
                   "moved_per_byte": round(moved[(op, n)] / data[(op, n)], 2), "copy_us": round(c_us, 1),
                   "excess_copies": round((f_us - n_us) / c_us, 2) if c_us > 0 else None,
                   "goal_us": round(n_us + 2 * c_us, 1), "ok": (f_us <= n_us + 2 * c_us) if judged else None}
            results.append(row)
            print(f"{op:18s} {n:>8,d}  native {n_us:9.1f} us  fallback {f_us:9.1f} us  ratio {ratio:6.2f}  "
                  f"copy {c_us:8.1f} us  excess {row['excess_copies']} copies  {row['path']}"
                  + ("" if row["ok"] is None else f"  {'ok' if row['ok'] else 'OVER'}"), flush=True)
    judged = [r for r in results if r["ok"] is not None]
    print(f"goal (round trips at {max(sizes):,} elements): {sum(r['ok'] for r in judged)}/{len(judged)} ops within "
          f"native + 2 copies; excess copies " + ", ".join(f"{r['op']} {r['excess_copies']}" for r in judged))
    out = {
        "benchmark": "fallback_installed",
        "rounds": args.rounds,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {cpu_model()}, {os.cpu_count()} cores, "
                   f"{torch.get_num_threads()} torch threads",
        "goal": "fallback_us <= native_us + 2 x copy_us (one device -> host copy of the bytes the op reads and "
                "writes), judged at the largest size for ops that take the CPU round trip",
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
