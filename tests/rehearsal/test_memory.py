"""The rehearsal's memory counters (opaudit/rehearsal/memory.py): exact current and peak bytes as storages are
created and freed, read the way training scripts read them (torch.cuda.* on an unported script), each
simulation in a process of its own."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, run_cli, run_python

MIB = 2**20


@pytest.fixture(scope="module")
def readings() -> dict[str, dict]:
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", str(FIXTURES / "fallback" / "memory_cuda.py"))
    assert rc == 0, stderr[-3000:]
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    found = {r["what"]: r for r in lines}
    print(f"200 memory_allocated() queries: {found['200 queries']['seconds'] * 1e3:.2f} ms")  # (not asserted)
    return found


def test_256_mib_allocated_and_freed(readings):
    assert readings["unseen"]["allocated"] == 0 and readings["unseen"]["peak"] == 256 * MIB
    assert readings["256 MiB"]["allocated"] == 256 * MIB
    freed = readings["freed"]
    assert freed["allocated"] == 0 and freed["peak"] >= 256 * MIB
    assert readings["reset"]["peak"] == readings["reset"]["allocated"] == 0  # reset_peak_memory_stats


def test_reserved_follows_a_caching_allocator(readings):
    for r in readings.values():
        if "allocated" in r:
            assert r["peak"] >= r["allocated"] and r["peak_reserved"] >= r["reserved"] >= r["allocated"], r
    assert readings["freed"]["reserved"] == 256 * MIB  # kept for reuse (and reused: not 512 MiB)
    assert readings["empty_cache"]["reserved"] == 0 and readings["empty_cache"]["peak_reserved"] >= 256 * MIB


def test_views_and_in_place_ops_count_their_storage_once(readings):
    assert readings["views"]["views"] == 7 and readings["views"]["allocated"] == MIB
    assert readings["views freed"]["allocated"] == 0


def test_a_resized_out_argument_counts_at_its_new_size(readings):
    assert readings["resized"]["allocated"] == 2 * MIB
    assert readings["resized freed"]["allocated"] == 0


def test_a_training_step_holds_exactly_its_tensors_and_returns_to_its_baseline(readings):
    r = readings["trained"]
    # parameters, AdamW's two moments per parameter (gradients set to None), the batch, the last loss
    assert r["allocated"] == 3 * r["params"] + r["data"] + r["loss"] + r["steps"]
    assert r["peak"] > r["allocated"] + r["params"]  # gradients and activations were there during the step
    assert readings["trained freed"]["allocated"] == readings["trained freed"]["before"] == 0


def test_each_device_index_counts_its_own():
    proc = run_python("memory_per_index.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:2] == ["1000 3000 3000 1000 3000", "0 3000 1000"]
