"""The rehearsal's memory counters (opaudit/rehearsal/memory.py): what a query costs, what counting costs per op,
and whether the count is the bytes really held.

    python bench/rehearsal_memory.py [--rounds 7] [--iters 5] [--queries 200] [--walks 5]
                                     [--out bench/results/rehearsal_memory.json]

The workload is rehearsal_small_ops.py's tiny GPT (transformers' GPT-2 from a config, 2 layers, width 32)
on the simulated device of the newest Ascend release, after two training iterations (parameters, AdamW's
state, the batches: the tensors a script holds when it asks ``torch.npu.memory_allocated()``).

- queries: ``--queries`` calls of ``memory_allocated()`` and as many of ``max_memory_allocated()``,
  against the baseline the counters replaced: a walk over ``gc.get_objects()`` that sums the storages
  under live simulated tensors, each once (what every query did before; ``--walks`` of them, per walk).
  The walk's total is also the check: the counters must say the same bytes.
- counting: a training iteration with the counters on against the same iteration with
  ``memory.track`` a no-op, interleaved per round, 1 torch thread: the ratio is what counting adds to a
  small-op workload, where a new storage per op is the common case.

No goal is asserted: queries in microseconds, not the walk's tens of milliseconds, and counting within the
noise of the iteration.

It measures the wrapper engine (tensor.SimTensor, ``OPAUDIT_REHEARSAL_DEVICE=wrapper``), whose storages
memory.py counts in Python; on the C++ device (opaudit.rehearsal.native) its allocator counts, in C++.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPAUDIT_REHEARSAL_DEVICE", "wrapper")  # (module doc)

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from rehearsal_small_ops import iteration, timed, tiny_gpt  # noqa: E402
from simulator_overhead import pin_malloc  # noqa: E402

from opaudit.rehearsal import memory, simulate  # noqa: E402
from opaudit.rehearsal.tensor import SimTensor  # noqa: E402

TARGET = "ascend"


def walk() -> int:
    """The bytes under live simulated tensors, each storage once, found by walking every live object."""
    seen: dict[int, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
    for obj in objects:
        if type(obj) is SimTensor:
            st = obj.elem.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--walks", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "rehearsal_memory.json"))
    args = ap.parse_args()
    pinned = pin_malloc()
    torch.set_num_threads(1)
    track = memory.track
    with simulate(TARGET) as sim:
        model = tiny_gpt().to("npu")
        run = iteration(model, "npu", False)
        for _ in range(2):
            run()
        gc.collect()
        npu = torch.npu  # type: ignore[attr-defined]
        live = sum(type(o) is SimTensor for o in gc.get_objects())

        t = time.perf_counter()
        for _ in range(args.queries):
            npu.memory_allocated()
            npu.max_memory_allocated()
        query_s = (time.perf_counter() - t) / (2 * args.queries)
        t = time.perf_counter()
        for _ in range(args.walks):
            walked = walk()
        walk_s = (time.perf_counter() - t) / args.walks
        counted = npu.memory_allocated()

        on, off = [], []
        for r in range(args.rounds):
            for counting in ((True, False) if r % 2 else (False, True)):
                memory.track = track if counting else (lambda storage, index: None)
                try:
                    (on if counting else off).append(timed(run, args.iters))
                finally:
                    memory.track = track
        target = sim.target
    ratio = statistics.median(a / b for a, b in zip(on, off, strict=True))
    result = {"benchmark": "rehearsal_memory", "target": target, "torch": torch.__version__,
              "python": platform.python_version(), "malloc_pinned": pinned,
              "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
              "live_simulated_tensors": live, "bytes_counted": counted, "bytes_walked": walked,
              "agree": counted == walked, "queries": 2 * args.queries, "query_us": round(query_s * 1e6, 2),
              "walk_ms": round(walk_s * 1e3, 2), f"{args.queries}_queries_before_s": round(walk_s * args.queries, 2),
              f"{args.queries}_queries_now_ms": round(query_s * args.queries * 1e3, 3),
              "walk_over_query": round(walk_s / query_s), "rounds": args.rounds, "iterations_per_round": args.iters,
              "iteration_counting_ms": round(statistics.median(on) * 1e3, 2),
              "iteration_not_counting_ms": round(statistics.median(off) * 1e3, 2), "counting_ratio": round(ratio, 3)}
    print(f"{live} live simulated tensors, {counted} bytes counted, {walked} walked: "
          f"{'agree' if counted == walked else 'DISAGREE'}")
    print(f"a query {result['query_us']} us, a walk {result['walk_ms']} ms ({result['walk_over_query']}x); "
          f"{args.queries} queries: {result[f'{args.queries}_queries_now_ms']} ms, "
          f"{result[f'{args.queries}_queries_before_s']} s by walking")
    print(f"training iteration: counting {result['iteration_counting_ms']} ms, not counting "
          f"{result['iteration_not_counting_ms']} ms, ratio {ratio:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if counted != walked:
        sys.exit(1)


if __name__ == "__main__":
    main()
