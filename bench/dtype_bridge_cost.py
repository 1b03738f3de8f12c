"""What a call costs on the CUDA stand-in when the CPU kernel refuses its dtype and the stand-in runs it wide and
casts back (opaudit/native/dtype_bridge.h), against the same op on the CPU and on the stand-in without bridging.

    python bench/dtype_bridge_cost.py [--rounds 7] [--calls 2000] [--out bench/results/dtype_bridge_cost.json]

Per case, the median over rounds of the time per call (µs) of:
- ``cpu``: the CPU kernel on CPU tensors in a dtype it runs (the baseline);
- ``stand_in``: the same call on the stand-in (its boxed kernel over the device memory: the cost every op pays,
  saving its arguments for a possible bridge included);
- ``bridged``: the call CUDA runs and the CPU refuses (integer histc, float16 softmax into float32, ...), which the
  stand-in computes wide.
Ratios are against ``cpu`` measured in the same round.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from opaudit import standin  # noqa: E402

if standin.prepare(note=print) is not None:
    sys.exit(f"the CUDA stand-in is not available: {standin.reason()}")
import torch  # noqa: E402

standin.install()
torch.set_num_threads(1)


def cases():
    """(name, the CPU baseline, the stand-in without bridging, the bridged call): each a no-argument function."""
    torch.manual_seed(0)
    ids = torch.randint(0, 8, (4096,), dtype=torch.int32)
    ids_f, ids_d = ids.float(), ids.cuda()
    scores = torch.randn(8, 64, 64)
    scores_h = scores.half()
    scores_f_d, scores_h_d = scores.cuda(), scores_h.cuda()
    small = torch.randn(64)
    small_d = small.cuda()
    small_c = torch.randn(64, dtype=torch.complex64)
    small_ch = small_c.to(torch.complex32).cuda()
    return [
        ("histc int32 (MoE routing)", lambda: torch.histc(ids_f, 8, 0, 7), lambda: torch.histc(ids_d.float(), 8, 0, 7),
         lambda: torch.histc(ids_d, 8, 0, 7)),
        ("softmax float16 -> float32 (eager attention)", lambda: scores.softmax(-1),
         lambda: scores_f_d.softmax(-1), lambda: scores_h_d.softmax(-1, dtype=torch.float32)),
        ("exp complex32, 64 elements", lambda: small_c.exp(), lambda: small_d.exp(), lambda: small_ch.exp()),
        ("add float32, 64 elements (no bridge)", lambda: small + small, lambda: small_d + small_d, None),
    ]


def per_call_us(fn, calls: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "dtype_bridge_cost.json")
    args = parser.parse_args()
    results = []
    for name, cpu, dev, bridged in cases():
        samples: dict[str, list[float]] = {"cpu": [], "stand_in": [], "bridged": []}
        for _ in range(args.rounds):
            samples["cpu"].append(per_call_us(cpu, args.calls))
            samples["stand_in"].append(per_call_us(dev, args.calls))
            if bridged is not None:
                samples["bridged"].append(per_call_us(bridged, args.calls))
        row = {"case": name, **{f"{k}_us": round(statistics.median(v), 2) for k, v in samples.items() if v}}
        for k in ("stand_in", "bridged"):
            if samples[k]:
                row[f"{k}_over_cpu"] = round(statistics.median(d / c for d, c in zip(samples[k], samples["cpu"],
                                                                                    strict=True)), 2)
        results.append(row)
        print(json.dumps(row))
    out = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "rounds": args.rounds, "calls": args.calls, "threads": 1, "bridged_calls": standin.bridged()[:20],
           "results": results}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
