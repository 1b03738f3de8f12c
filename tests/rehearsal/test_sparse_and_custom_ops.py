"""Sparse COO tensors and ops of other namespaces on the simulated device, as on a plugin's device: a sparse tensor
moves there and back, is made there, coalesced, multiplied (torch.sparse.mm, mm, spmm) and differentiated through;
an op of another namespace with a CPU kernel (a library's custom op, as torchvision::nms) runs through the device's
autograd key and its CPU redirect. Every op, sparse or custom, is judged by the target's data as the audit judges
it (Matrix.resolve: a custom op by where it has kernels), so a strict rehearsal stops where the audit says."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT, run_cli

from opaudit.matrix import load_matrix

SPARSE = """import torch
i = torch.tensor([[0, 1, 1, 2], [2, 0, 2, 1]])
v = torch.tensor([3., 4., 5., 6.])
a = torch.sparse_coo_tensor(i, v, (3, 3))
dense = a.to_dense()
d = a.cuda()
assert d.device.type != "cpu" and d.is_sparse
c = d.coalesce()
assert c.is_coalesced() and c.indices().device == d.device and c.values().device == d.device and c._nnz() == 4
x = torch.randn(3, 2, device="cuda", requires_grad=True)
y, z, w = torch.sparse.mm(c, x), torch.mm(c, x), torch.spmm(c, x)
assert y.device == d.device and torch.allclose(y.cpu(), dense @ x.detach().cpu())
(y.sum() + z.sum() + w.sum()).backward()
assert x.grad.device == d.device and torch.allclose(x.grad.cpu(), 3 * dense.sum(0).unsqueeze(1).expand(3, 2))
values = torch.randn(4, device="cuda", requires_grad=True)
s = torch.sparse_coo_tensor(i.cuda(), values, (3, 3))
expected = torch.sparse_coo_tensor(i, values.detach().cpu(), (3, 3)).to_dense()
assert s.device == d.device and torch.equal(s.detach().cpu().to_dense(), expected)
torch.sparse.mm(s, torch.ones(3, 1, device="cuda")).sum().backward()
assert values.grad.device == d.device and values.grad.cpu().tolist() == [1.0] * 4
back = c.cpu()
assert back.is_sparse and back.device.type == "cpu" and torch.equal(back.to_dense(), dense)
print("sparse ok")
"""

CUSTOM = """import torch
lib = torch.library.Library("opaudit_demo", "DEF")
lib.define("twice(Tensor x) -> Tensor")
lib.impl("twice", lambda x: x * 2, "CPU")
x = torch.arange(4.0, device="cuda")
y = torch.ops.opaudit_demo.twice(x)
assert y.device == x.device and y.cpu().tolist() == [0.0, 2.0, 4.0, 6.0], y
print("custom ok")
"""


def _run(tmp_path, name, text, target, *flags):
    script, stats = tmp_path / f"{name}.py", tmp_path / f"{name}-{target}.json"
    script.write_text(text)
    rc, out, err = run_cli("run", "--simulate", target, *flags, "--stats", str(stats), "--", str(script))
    return rc, out, err, (json.loads(stats.read_text()) if stats.exists() else {})


def test_sparse_coo_tensors_live_on_the_device_and_are_judged_by_the_targets_data(tmp_path):
    rc, out, err, st = _run(tmp_path, "sparse", SPARSE, "ascend")
    assert rc == 0 and "sparse ok" in out, err[-3000:]
    m = load_matrix(st["target"])
    ops = {o["op"]: o for o in st["ops"]}
    assert {"_coalesce", "_sparse_coo_tensor_with_dims_and_tensors"} <= set(ops), sorted(ops)
    for name, o in ops.items():  # each op as the audit resolves it for the target
        assert o["status"] == m.resolve(name).status, o
        assert (o["path"] == "native") == (o["status"] in ("native", "composite", "unknown")), o
    rc, _, err, _ = _run(tmp_path, "sparse", SPARSE, "ascend", "--strict")
    missing = sorted(n for n, o in ops.items() if o["status"] == "missing")
    assert rc != 0 and "--strict" in err and any(f"'aten::{n}'" in err for n in missing), err[-2000:]


def test_an_op_of_another_namespace_runs_through_the_devices_autograd_key_as_its_data_says(tmp_path):
    rc, out, err, st = _run(tmp_path, "custom", CUSTOM, "ascend")
    assert rc == 0 and "custom ok" in out, err[-3000:]
    (o,) = [o for o in st["ops"] if o["op"] == "opaudit_demo::twice"]
    # a CPU kernel only: the vendor's CPU fallback runs it where the target has one on by default (Ascend)
    assert (o["status"], o["path"], o["calls"]) == ("cpu_fallback", "vendor_cpu", 1), o
    rc, out, err, st = _run(tmp_path, "custom", CUSTOM, "musa")
    assert rc == 0 and "custom ok" in out, err[-3000:]
    (o,) = [o for o in st["ops"] if o["op"] == "opaudit_demo::twice"]
    assert o["status"] == "missing" and o["path"] == "cpu", o  # none there: opaudit's fallback runs it
    rc, _, err, _ = _run(tmp_path, "custom", CUSTOM, "musa", "--strict")
    assert rc != 0 and "Could not run 'opaudit_demo::twice'" in err, err[-2000:]


def test_a_dense_ops_sparse_gradient_trains_as_on_the_cpu(tmp_path):
    """EmbeddingBag(sparse=True) (DLRM's tables, in the fourth held-out set of fix --verify): its backward, a dense
    op, gives a sparse COO gradient that must become the device's (host_sparse.h; it stopped the rehearsal with
    "Cannot access storage of SparseTensorImpl"), and SGD adds it into the table: the losses are the CPU's."""
    script = ROOT / "tests" / "fixtures" / "scripts" / "sparse_embedding.py"
    cpu = subprocess.run([sys.executable, str(script), "cpu"], capture_output=True, text=True, timeout=120)
    assert cpu.returncode == 0, cpu.stderr[-2000:]
    losses = [line for line in cpu.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 3
    for target in ("ascend", "musa"):
        rc, out, err = run_cli("run", "--simulate", target, "--", str(script), cwd=tmp_path)
        assert rc == 0, err[-2000:]
        assert [line for line in out.splitlines() if line.startswith("step ")] == losses, (target, out)
