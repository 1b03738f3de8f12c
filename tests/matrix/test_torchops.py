"""PyTorch's op tables against the research notes' numbers (vendors-musa-xpu-xla-core.md, section 2)."""

from __future__ import annotations

import pytest

from opaudit.matrix.torchops import CEA, CIA

# version: (funcs, autogen names listed, CUDA eff., CPU eff., MPS eff., XPU eff., CompImplicit, CompExplicit)
RESEARCH = {
    "2.0.0": (2498, 496, 1169, 1141, 535, 0, 868, 307),
    "2.4.0": (2613, 521, 1224, 1048, 665, 0, 840, 525),
    "2.6.0": (2633, 526, 1228, 1050, 707, 18, 845, 537),
    "2.13.0": (2584, 533, 1265, 1064, 890, 40, 752, 544),
    "2.14.1": (2585, 534, 1268, 1070, 912, 1155, 750, 544),
}
# add.out is the one entry with ufunc_inner_loop: torchgen generates its CPU and CUDA kernels, which the
# research's rule (dispatch keys only) does not see; add.out, add.Tensor and add_.Tensor are the difference.
UFUNC = {"add.out", "add.Tensor", "add_.Tensor"}


@pytest.mark.parametrize("version", sorted(RESEARCH))
def test_op_tables_reproduce_the_research_counts(ctx, upstream, version):
    funcs, autogen_listed, cuda, cpu, mps, xpu, cia, cea = RESEARCH[version]
    ops = ctx.torch[version]
    assert sum(1 for o in ops.ops.values() if not o.autogen) == funcs
    # the research counts autogen names as listed; a few name an op that also has its own entry
    listed = _autogen_listed(upstream / "pytorch" / f"v{version}" / "native_functions.yaml")
    assert len(listed) == autogen_listed
    assert sum(1 for o in ops.ops.values() if o.autogen) == len(set(listed) - _own_entries(ops))
    assert len(ops.with_kernel("CUDA") - UFUNC) == cuda and UFUNC <= ops.with_kernel("CUDA")
    assert len(ops.with_kernel("CPU") - UFUNC) == cpu
    assert len(ops.with_kernel("MPS")) == mps
    assert len(ops.with_kernel("XPU")) == xpu
    assert sum(1 for o in ops.ops.values() if CIA in o.keys) == cia
    assert sum(1 for o in ops.ops.values() if CEA in o.keys and not o.autogen) == cea


def _autogen_listed(path):
    import yaml

    names = []
    for e in yaml.load(path.read_text(), Loader=yaml.CSafeLoader):
        names += [a.strip() for a in str(e.get("autogen") or "").split(",") if a.strip()]
    return names


def _own_entries(ops):
    return {n for n, o in ops.ops.items() if not o.autogen}


def test_structured_delegates_views_and_composites(ctx):
    ops = ctx.torch["2.13.0"]
    relu = ops.get("relu")
    assert relu is not None and "CPU" in relu.keys
    assert ops.get("add.Tensor").delegate == "add.out"
    assert ops.kernel_on("add_.Tensor", "MPS")
    assert ops.get("transpose.int").view and ops.get("view").view and not ops.get("add.Tensor").view
    assert ops.get("linear").implicit and ops.get("abs").explicit
    assert ops.get("zeros_like.out").autogen and ops.get("zeros_like.out").explicit
    assert ops.get("aten::relu.default") is None and ops.get("relu.default") is not None  # ".default" accepted
