"""What a device registered in C++ would cost: the floor of a stand-in device whose tensors are real device
tensors and whose kernels are CPU kernels called from C++, with no Python on an op's path.

    python bench/native_device_floor.py [--rounds 7] [--out bench/results/native_device_floor.json]

The simulated device (opaudit.rehearsal.simulator) is a Python wrapper tensor: every op enters Python
(``__torch_dispatch__``), unwraps, calls the CPU kernel from Python and wraps each result in a new Python
tensor; on small ops that fixed cost is several times the op (rehearsal_small_ops.py: its bare floor, the
wrapper with no policy at all, is over 3x eager on a tiny GPT). This measures the other design on the same
workloads: the C++ test backend (tests/fixtures/plugins/testdev, compiled on first use, registered as
``npu``) with ``enable_native`` for every op the workload reaches (one generic boxed C++ kernel: the CPU
kernel over the device's memory, no copy), found by running the workload until no op is missing.

Workloads, each against the same code eager on CPU tensors, interleaved per round, 1 torch thread, the
ratio per round of device / eager (median and min over rounds): the tiny GPT iteration of
rehearsal_small_ops.py (fp32: evaluation forward under no_grad, forward, loss, backward, AdamW step);
ResNet-50 (2x3x64x64), BERT-base and GPT-2 (batch 2, sequence 32) forward (eval, no_grad); and the forward
with opaudit's recorder on (a TorchDispatchMode: what ``opaudit trace`` adds on such a device). No
rehearsal policy runs here (statuses, statistics, the target's autocast): this is the floor of the design,
not a simulator built on it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "plugins"))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))

import hf_models  # noqa: E402
import resnet  # noqa: E402
import testdev  # noqa: E402
from rehearsal_small_ops import BATCH, SEQ, tiny_gpt  # noqa: E402

from opaudit.tracing.recorder import Recording, recording  # noqa: E402
from opaudit.tracing.run import _call  # noqa: E402

DEVICE = "npu"
_MISSING = re.compile(r"Could not run '([\w:.]+)' with arguments from the '\w+' backend"
                      r"|^(convolution_overrideable) not")


def native_until_it_runs(run: Callable[[], None], ext, enabled: list[str], limit: int = 200) -> None:
    """Run ``run``; for each op the device lacks, register testdev's native kernel for it and run again."""
    for _ in range(limit):
        try:
            run()
            return
        except (NotImplementedError, RuntimeError) as e:
            m = _MISSING.search(str(e))
            if m is None:
                raise
            name = (m.group(1) or m.group(2)).removeprefix("aten::")
            if name in enabled:
                raise
            ext.enable_native([name])
            enabled.append(name)
    raise RuntimeError("too many missing ops")


def gpt_iteration(model: torch.nn.Module, device: str) -> Callable[[], None]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 64, (BATCH, SEQ), generator=g).to(device) for _ in range(2)]

    def run() -> None:
        with torch.no_grad():
            model.eval()
            model(input_ids=ids[0], labels=ids[0])
            model.train()
        loss = model(input_ids=ids[1], labels=ids[1]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return run


def forward(model: torch.nn.Module, inputs, traced: bool) -> Callable[[], None]:
    def run() -> None:
        model.eval()
        with torch.no_grad():
            if traced:
                with recording(Recording(root=model)):
                    _call(model, inputs)
            else:
                _call(model, inputs)
    return run


def to(inputs, device: str):
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)


def timed(fn: Callable[[], None], iters: int) -> float:
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) / iters


def measure(name: str, eager: Callable[[], None], on_device: dict[str, Callable[[], None]], rounds: int,
            iters: int) -> dict:
    for _ in range(2):
        eager()
        for fn in on_device.values():
            fn()
    times: dict[str, list[float]] = {"eager": [], **{k: [] for k in on_device}}
    for _ in range(rounds):
        times["eager"].append(timed(eager, iters))
        for k, fn in on_device.items():
            times[k].append(timed(fn, iters))
    row: dict = {"workload": name, "eager_ms": round(min(times["eager"]) * 1e3, 2)}
    for k in on_device:
        row[f"{k}_ms"] = round(min(times[k]) * 1e3, 2)
        row[f"{k}_ratio_median"] = round(statistics.median(
            d / e for e, d in zip(times["eager"], times[k], strict=True)), 3)
        row[f"{k}_ratio_of_mins"] = round(min(times[k]) / min(times["eager"]), 3)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native_device_floor.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    ext = testdev.register(DEVICE)
    enabled: list[str] = []
    results = []

    model = tiny_gpt()
    dev_model = copy.deepcopy(model).to(DEVICE)
    dev_run = gpt_iteration(dev_model, DEVICE)
    native_until_it_runs(dev_run, ext, enabled)
    results.append(measure("tiny GPT iteration (fp32)", gpt_iteration(model, "cpu"), {"device": dev_run},
                           args.rounds, 5))
    print(results[-1], flush=True)

    torch.manual_seed(0)
    workloads = [("resnet50 forward", resnet.get_model(), resnet.get_inputs())]
    for hf in ("bert", "gpt2"):
        m, x = getattr(hf_models, hf)()
        workloads.append((f"{hf} forward", m, x))
    for name, m, x in workloads:
        dm, dx = copy.deepcopy(m).to(DEVICE), to(x, DEVICE)
        native_until_it_runs(forward(dm, dx, False), ext, enabled)
        results.append(measure(name, forward(m, x, False), {"device": forward(dm, dx, False),
                                                             "traced_on_device": forward(dm, dx, True),
                                                             "traced_on_cpu": forward(m, x, True)},
                               args.rounds, 1))
        print(results[-1], flush=True)

    out = {"benchmark": "native_device_floor", "torch": torch.__version__, "python": platform.python_version(),
           "machine": f"{platform.machine()}, 1 torch thread", "rounds": args.rounds,
           "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
           "ops_given_a_native_kernel": sorted(enabled), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
