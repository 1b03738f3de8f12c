"""Cost per CPU-fallback call by tensor size: ops forced to the CPU in a simulation vs the same ops native.

    python bench/fallback_cpu_cost.py [--rounds 5] [--threads 1] [--out bench/results/fallback_cpu_cost.json]

Four ops the newest Ascend release has (relu, add.Tensor, mm, _softmax), on float32 inputs of 1e2, 1e4 and
1e6 elements each (mm: square matrices of 10, 100 and 1000; softmax: rows of 100), called through
``torch.relu``, ``torch.add``, ``torch.mm`` and ``torch.softmax`` on the simulated device. A process simulates
one device, so each round runs two fresh processes (their order alternating per round): one in
``simulate("ascend", force_cpu=[those four ops])``, where every call takes opaudit's CPU round trip, and one
in ``simulate("ascend")``, where they run natively. Each times the calls per op and size (batches of calls
of at least 20 ms, the median batch), and the forced one reads from its statistics the bytes counted per
call (``stats.ops[(op, "cpu")]``: ``to_host``, ``to_device``) and the seconds the statistics charge the
fallback per call. The ratio is the median over rounds of forced / native per call.

In a simulation the CPU round trip copies nothing: the data of a simulated tensor is already on the host,
so forced / native measures only the simulator's bookkeeping for a fallback, and the bytes are what a real
device would move. So the main process also measures, on plain CPU tensors, each op alone and the op with
its round trip done as host copies (``clone()`` of each input "to the host", the op, ``clone()`` of the
output "back"): an ESTIMATE of the cost of a fallback call on a real device whose host link copies at
host memcpy speed; a real link (PCIe, tens of GB/s at best, plus synchronisation and launch) is slower.
One torch thread by default: these are single ops, and on a small VM a parallel region can stall for
milliseconds. No goal: reference figures for the fallback's cost model.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from simulator_overhead import pin_malloc  # noqa: E402

from opaudit.matrix import load_matrix  # noqa: E402

TARGET = "ascend"
FORCED = ["aten::relu", "aten::add.Tensor", "aten::mm", "aten::_softmax"]
SIZES = (100, 10_000, 1_000_000)
BATCH_S = 0.02
BATCHES = 5


def cases(size: int, device: str | torch.device):
    """(the op's name in the statistics, its inputs, the call) per op, inputs of ``size`` elements each."""
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(size, generator=g).to(device) for _ in range(2))
    side = round(size**0.5)
    a, b = (torch.randn(side, side, generator=g).to(device) for _ in range(2))
    rows = x.view(-1, min(size, 100))
    return [
        ("relu", (x,), torch.relu),
        ("add.Tensor", (x, y), torch.add),
        ("mm", (a, b), torch.mm),
        ("_softmax", (rows,), lambda t: torch.softmax(t, -1)),
    ]


def per_call(fn, args) -> float:
    """Seconds per call: the median of BATCHES batches of at least BATCH_S each."""
    for _ in range(3):
        fn(*args)
    n, t = 1, 0.0
    while True:  # calibrate the batch
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        t = time.perf_counter() - t0
        if t >= BATCH_S:
            break
        n = max(n * 2, int(n * BATCH_S / max(t, 1e-9)) + 1)
    times = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def worker(forced: bool) -> dict:
    from opaudit.rehearsal import simulate

    out: dict = {}
    with simulate(TARGET, force_cpu=FORCED if forced else ()) as sim:
        device = torch.device(sim.name, 0)
        path = "cpu" if forced else "native"
        for size in SIZES:
            for op, args, fn in cases(size, device):
                fn(*args)
                s = sim.stats.ops[(op, path)]
                before = (s.calls, s.to_host, s.to_device, s.seconds)
                us = per_call(fn, args) * 1e6
                calls = s.calls - before[0]
                out[f"{op}/{size}"] = {
                    "us": us, "path": s.path, "to_host": (s.to_host - before[1]) / calls,
                    "to_device": (s.to_device - before[2]) / calls,
                    "stats_us": (s.seconds - before[3]) / calls * 1e6}
    return out


def estimate(size: int) -> dict[str, dict[str, float]]:
    """Per op, on plain CPU tensors: the op alone, and with its round trip as host copies (an estimate)."""
    out = {}
    for op, args, fn in cases(size, "cpu"):
        def roundtrip(*inputs, fn=fn):
            return fn(*(t.clone() for t in inputs)).clone()  # to the host, the op, back to the device

        out[op] = {"eager_us": per_call(fn, args) * 1e6, "roundtrip_us": per_call(roundtrip, args) * 1e6}
    return out


def run_worker(forced: bool, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", "forced" if forced else "native", "--threads", str(threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", choices=("forced", "native"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "fallback_cpu_cost.json"))
    args = ap.parse_args()
    pinned = pin_malloc()
    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args.worker == "forced")))
        return
    forced, native, est = [], [], []
    for r in range(args.rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        got = {f: run_worker(f, args.threads) for f in order}
        forced.append(got[True])
        native.append(got[False])
        est.append({size: estimate(size) for size in SIZES})
        print(f"round {r + 1}/{args.rounds}", flush=True)
    results = []
    for size in SIZES:
        for op, *_ in cases(size, "cpu"):
            key = f"{op}/{size}"
            f = [x[key] for x in forced]
            n = [x[key] for x in native]
            paths = {x["path"] for x in f} | {x["path"] for x in n}
            if paths != {"cpu", "native"}:
                raise SystemExit(f"{key}: unexpected paths {paths}")
            eager = statistics.median(e[size][op]["eager_us"] for e in est)
            trip = statistics.median(e[size][op]["roundtrip_us"] for e in est)
            row = {
                "op": op, "elements": size,
                "forced_us": round(statistics.median(x["us"] for x in f), 2),
                "native_us": round(statistics.median(x["us"] for x in n), 2),
                "ratio": round(statistics.median(a["us"] / b["us"] for a, b in zip(f, n, strict=True)), 3),
                "stats_seconds_us_per_call": round(statistics.median(x["stats_us"] for x in f), 2),
                "to_host_bytes_per_call": int(f[0]["to_host"]),
                "to_device_bytes_per_call": int(f[0]["to_device"]),
                "eager_cpu_us": round(eager, 2),
                "estimate_roundtrip_at_memcpy_us": round(trip, 2),
                "estimate_copies_us": round(trip - eager, 2),
            }
            results.append(row)
            print(f"{op:10s} {size:>9,}  forced {row['forced_us']:9.1f} us  native {row['native_us']:9.1f} us  "
                  f"ratio {row['ratio']:5.2f}  bytes/call {row['to_host_bytes_per_call']:>9,} to host "
                  f"{row['to_device_bytes_per_call']:>9,} back  |  eager CPU {eager:9.1f} us, ESTIMATED with "
                  f"host copies {trip:9.1f} us", flush=True)
    out = {
        "benchmark": "fallback_cpu_cost",
        "target": load_matrix(TARGET).release.key,
        "force_cpu": FORCED,
        "rounds": args.rounds,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "malloc_pinned": pinned,
        "note": ("forced_us / native_us: per call in a simulation, where a CPU round trip copies nothing (the data "
                 "is already on the host): the ratio is the simulator's fallback bookkeeping; the bytes are what a "
                 "device would move. estimate_*: plain CPU, the op with clone() of its inputs and of its output, "
                 "an ESTIMATE of a fallback call on a device whose host copies run at memcpy speed"),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
