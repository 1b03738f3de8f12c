"""The matrix commands as a user runs them: `opaudit matrix list|show|diff|coverage`, `opaudit doctor`."""

from __future__ import annotations

import re

import torch
from helpers import run_cli

from opaudit.matrix import load_database, load_matrix
from opaudit.matrix.coverage import diff


def test_list_marks_each_vendors_default_and_lists_every_release():
    rc, out, err = run_cli("matrix", "list")
    assert rc == 0, err
    db = load_database()
    for e in db.entries:
        assert e.key in out, e.key
    # a vendor alone means its newest published release, never a development snapshot
    assert re.search(r"ascend@2\.14\.0 \*", out) and "ascend@master+2.14 (pre)" in out
    assert re.search(r"xla@2\.9\.0 \*", out) and "xla@master (pre)" in out
    assert re.search(r"cambricon@1\.22\.2\+torch2\.4\.0 \*", out)


def test_compatibility_table():
    rc, out, err = run_cli("matrix", "list", "--compat")
    assert rc == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("2.12 "))
    block = " ".join(lines[start:start + 4])  # (a cell holds a release name a line)
    assert "2.12.0" in block and "1.0.0.21200+br2xx" in block  # ascend 2.12.0 wheel and Biren's 2.12 build


def test_the_compatibility_table_stacks_at_80_columns_with_release_names_whole():
    rc, out, err = run_cli("matrix", "list", "--compat", env={"COLUMNS": "80"})
    assert rc == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    lines = out.splitlines()
    start = lines.index("PyTorch 2.12")
    block = lines[start + 1:lines.index("PyTorch 2.13")]
    assert any(line.split()[0] == "biren" and "1.0.0.21200+br2xx" in line for line in block)
    names = {n.strip(",") for line in lines if line.startswith("  ") for n in line.split()[1 if line[2] != " " else 0:]}
    assert "2.1.0.post13" in names and "1.23.0.dev+torch2.1.0" in names  # never broken inside a name


def test_show_by_package_version_tag_vendor_release_and_vendor_alone():
    rc, out, _ = run_cli("matrix", "show", "ascend@2.6.0.post5")
    assert rc == 0 and out.startswith("ascend@2.6.0.post5")
    assert "vendor release 7.3.0" in out and "935 dtype caveats" in out
    rc, out, _ = run_cli("matrix", "show", "ascend@v7.3.0-pytorch2.6.0")
    assert rc == 0 and out.startswith("ascend@2.6.0.post5")
    rc, out, _ = run_cli("matrix", "show", "ascend@7.3.0")  # a vendor release built for several PyTorch lines
    line = torch.__version__.split("+")[0].rsplit(".", 1)[0]
    keys = {e.key for e in load_database().by_vendor["ascend"] if e.vendor_release == "7.3.0"}
    assert rc == 0 and out.split()[0] in keys
    assert f"for PyTorch {line}" in out or "for PyTorch 2.9.0" in out  # the installed line, else the newest
    rc, out, _ = run_cli("matrix", "show", "ascend")
    assert rc == 0 and out.startswith("ascend@2.14.0")


def test_show_resolves_ops_the_way_a_cpu_trace_names_them():
    rc, out, err = run_cli("matrix", "show", "ascend@2.6.0.post5",
                           "--op", "aten::_scaled_dot_product_flash_attention_for_cpu", "--op", "aten::add_.Tensor",
                           "--op", "aten::_foreach_add_.Scalar",
                           env={"COLUMNS": "250"})
    assert rc == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("aten::")}
    sdpa = rows["aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert "missing" not in sdpa and "the CPU's pick for scaled_dot_product_attention" in sdpa
    assert " native" in rows["aten::add_.Tensor"]


def test_xla_runs_in_place_and_out_variants_through_functionalization():
    rc, out, err = run_cli("matrix", "show", "xla@2.9.0", "--op", "aten::add_.Tensor", "--op", "aten::relu_",
                           env={"COLUMNS": "250"})
    assert rc == 0, err
    assert re.search(r"aten::add_\.Tensor\s+native via add\.Tensor\s+functionalization", out)
    assert re.search(r"aten::relu_\s+native via relu\s", out)


def test_show_a_user_matrix_with_the_matrix_option(tmp_path):
    path = tmp_path / "acme.toml"
    path.write_text('[release]\nvendor = "acme"\nname = "1.0"\ntorch = "2.6.0"\ndevice_type = "acme"\n'
                    'dispatch_key = "PrivateUse1"\n[ops]\nnative = """\nmm\nadd.out\n"""\n')
    rc, out, err = run_cli("matrix", "show", "--matrix", str(path), "--op", "add.Tensor", "--op", "bmm",
                           env={"COLUMNS": "250"})
    assert rc == 0, err
    assert re.search(r"add\.Tensor\s+native via add\.out", out) and re.search(r"bmm\s+missing", out)
    path.write_text('[release]\nvendor = "acme"\nname = "1.0"\ntorch = "2.6.0"\ndevice_type = "acme"\n'
                    'dispatch_key = "PrivateUse1"\n[ops]\nnative = ["mm", mm]\n')
    rc, _, err = run_cli("matrix", "show", "--matrix", str(path))
    assert rc == 2 and str(path) in err and "line 8" in err and "Traceback" not in err
    path.write_text(path.read_text().replace('["mm", mm]', '["mm", "bmm(Tensor self)"]'))
    rc, _, err = run_cli("matrix", "show", "--matrix", str(path))
    assert rc == 2 and f"{path} (line 8): [ops] native: 'bmm(Tensor self)' is not an op name" in err


def test_diff_lists_gains_and_losses():
    rc, out, err = run_cli("matrix", "diff", "ascend@2.1.0", "ascend@2.2.0", env={"COLUMNS": "250"})
    assert rc == 0, err
    db = load_database()
    expected = diff(db.release(db.find("ascend@2.1.0")), db.release(db.find("ascend@2.2.0")))
    native = next(d for d in expected if d.category == "native")
    assert f"native: +{len(native.gained)} -{len(native.lost)}" in out
    assert native.gained[0] in out


def test_coverage_shares_of_the_cuda_set():
    rc, out, err = run_cli("matrix", "coverage", "xla", "musa")
    assert rc == 0, err
    row = next(line for line in out.splitlines() if line.startswith("xla@2.9.0 "))
    share = float(row.split()[-1].rstrip("%"))
    assert 20 < share < 23  # research/vendors-musa-xpu-xla-core.md: 21.5% for v2.8.0 .. master
    assert "musa@2.7.1" in out


def test_unknown_targets_are_one_clear_message():
    rc, _, err = run_cli("matrix", "show", "ascnd")
    assert rc == 2 and "unknown target vendor 'ascnd'" in err and "ascend" in err and "Traceback" not in err
    rc, _, err = run_cli("matrix", "list", "acme")
    assert rc == 2 and "unknown target vendor" in err
    rc, _, err = run_cli("matrix", "diff", "xla@2.9.0", "xla@9.9")
    assert rc == 2 and "xla has no release '9.9'" in err and "close matches" in err


def test_doctor_names_the_installed_torch_and_the_device_variables():
    rc, out, err = run_cli("doctor", env={"ASCEND_RT_VISIBLE_DEVICES": "0,1"})
    assert rc == 0, err
    assert f"torch {torch.__version__}" in out
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1" in out


def test_the_installed_release_of_a_vendor_follows_the_plugin_then_the_torch_line():
    """What `run --fallback ascend` names in a process with the plugin: the installed plugin's own release, else the
    newest published release built for the running torch's line (torch_npu 2.1.0.postN beside torch 2.1), else
    the newest; and the fallback's target resolution uses it."""
    from opaudit.fallback.live import resolve_target

    db = load_database()
    assert db.installed("ascend", "2.1.0.post10", "2.1.2").key == "ascend@2.1.0.post10"
    on_21 = db.installed("ascend", None, "2.1.2")
    assert on_21.torch == "2.1.0" and not on_21.prerelease
    assert on_21.key == [e for e in db.by_vendor["ascend"] if e.torch == "2.1.0" and not e.prerelease][-1].key
    assert db.installed("ascend", None, "1.9.0").key == db.newest("ascend").key  # no release for that line
    assert db.installed("musa", None, "2.5.1").torch == "2.5.0"
    line = torch.__version__.split("+")[0].rsplit(".", 1)[0]
    shown = resolve_target("ascend")[0]
    assert db.find(shown).torch.startswith(line + ".") or db.find(shown).key == db.newest("ascend").key
    assert resolve_target("ascend@2.4.0")[0] == "ascend@2.4.0"  # a release named is that release


def test_sparse_coo_ops_run_on_the_core_targets_sparse_keys():
    """_indices, _values, _coalesce and the sparse constructors have kernels on SparseCUDA / SparseMPS / SparseCPU
    only (native_functions.yaml): the core targets run them, so the trace of a sparse embedding's backward is not
    "missing" on CUDA itself; a plugin whose data lists no sparse kernel still lacks them."""
    sparse = ["_indices", "_values", "_coalesce", "_sparse_coo_tensor_with_dims_and_tensors"]
    line = ".".join(torch.__version__.split(".")[:2])
    for target in (f"cuda@{line}", f"cpu@{line}", f"mps@{line}"):
        m = load_matrix(target)
        assert {op: m.resolve(op).status for op in sparse} == dict.fromkeys(sparse, "native"), target
    assert load_matrix("cuda@2.1.0").resolve("_indices").status == "native"
    ascend = load_matrix("ascend")
    assert ascend.resolve("_indices").status == "missing"
