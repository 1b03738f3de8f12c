"""Matrix.resolve: the status rules, device-selected composites, user matrices, finding targets."""

from __future__ import annotations

import pytest

from opaudit.errors import InputError
from opaudit.matrix import Release, load_database, load_matrix
from opaudit.matrix.matrix import Matrix

ACME = """
[release]
vendor = "acme"
name = "1.0"
torch = "2.6.0"
device_type = "acme"
dispatch_key = "PrivateUse1"

[cpu_fallback]
exists = true
default_on = true
switch = "ACME_CPU_FALLBACK=0 disables it"

[ops]
native = ["add.out", "mm", "bmm", "as_strided", "empty.memory_format", "native_dropout", "native_dropout_backward",
          "addmm", "convolution_overrideable", "scaled_dot_product_attention"]
forced_cpu = ["nonzero"]
unsupported = ["cumsum.out"]
custom = ["acme::fused_rope"]
"""


@pytest.fixture()
def acme(tmp_path):
    path = tmp_path / "acme.toml"
    path.write_text(ACME)
    return path


def test_the_status_rules_on_a_user_matrix(acme):
    m = load_matrix(str(acme))
    assert m.key == "acme@1.0" and m.torch_ops is not None and m.torch_ops.version == "2.6.0"
    s = m.resolve("aten::add_.Tensor")  # a structured in-place op runs the .out kernel
    assert (s.status, s.via) == ("native", "add.out")
    assert m.resolve("aten::t.default").status == "composite"  # a view: its leaf as_strided is native
    assert m.resolve("aten::nonzero").status == "cpu_fallback"
    assert m.resolve("aten::cumsum.out").status == "missing"
    assert m.resolve("acme::fused_rope").status == "native"
    relu = m.resolve("aten::relu.default")  # backend kernels only, none here: the plugin's CPU fallback
    assert relu.status == "cpu_fallback" and "ACME_CPU_FALLBACK" in relu.note
    cudnn = m.resolve("aten::_cudnn_rnn")  # no CPU kernel for the fallback to run
    assert cudnn.status == "missing" and "no CPU kernel" in cudnn.note
    conv = m.resolve("aten::convolution.default")  # CompositeExplicitAutograd
    assert conv.status == "composite"
    abs_ = m.resolve("aten::abs.default")  # composite over abs.out, which acme lacks: the fallback runs it
    assert (abs_.status, abs_.via) == ("cpu_fallback", "abs.out") and abs_.leaves == ("abs.out",)
    assert m.resolve("aten::no_such_op").status == "unknown"
    assert m.resolve("mylib::op").status == "unknown"


def test_device_selected_composites_resolve_to_the_targets_pick(acme):
    m = load_matrix(str(acme))
    sdpa = m.resolve("aten::scaled_dot_product_attention.default")
    assert sdpa.status == "native" and sdpa.via is None  # acme registers the composite itself
    # the CPU's pick in a CPU trace is not "missing on acme": it resolves to acme's pick
    cpu_pick = m.resolve("aten::_scaled_dot_product_flash_attention_for_cpu")
    assert cpu_pick.status == "native" and cpu_pick.note.startswith("the CPU's pick")
    drop = m.resolve("aten::dropout.default")  # PrivateUse1 takes the fused kernel
    assert drop.status == "native" and drop.via == "fused dropout"
    cuda = load_matrix("cuda@2.13.0")
    assert cuda.resolve("aten::lstm.input").via == "cuDNN RNN"
    mps = load_matrix("mps@2.13.0")
    assert mps.resolve("aten::dropout.default").via == "bernoulli mask"  # MPS is not on the fused list
    assert mps.resolve("aten::mkldnn_rnn_layer_backward").via == "MPS LSTM"


def test_targets_of_pytorch_itself():
    cuda = load_matrix("cuda")
    assert cuda.key == "cuda@2.14.1" and cuda.release.torch == "2.14.1"  # the newest
    assert load_matrix("cuda@2.6").key == "cuda@2.6.0"  # an alias
    assert cuda.resolve("aten::_foreach_add_.Scalar").status == "native"
    cpu = load_matrix("cpu@2.13.0")
    assert cpu.resolve("aten::_foreach_add_.Scalar").status == "composite"  # CPU runs the slow path
    mps = load_matrix("mps@2.13.0")
    assert [c.dtypes for c in mps.caveats("aten::add.Tensor", ("float64", "float64"))] == [["float64", "complex128"]]
    assert mps.caveats("aten::add.Tensor", ("float32", "float32")) == []
    assert "PYTORCH_ENABLE_MPS_FALLBACK" in mps.resolve("aten::_linalg_svd").note


def test_unknown_targets_name_close_matches():
    with pytest.raises(InputError) as e:
        load_database().find("cudda")
    assert "cuda" in e.value.hint
    with pytest.raises(InputError) as e:
        load_database().find("cuda@2.99")
    assert "2.9" in e.value.hint


@pytest.mark.parametrize("text, message", [
    ("[release]\nvendor = 'x'\n", "lacks name, torch, device_type, dispatch_key"),
    ("[release\nvendor = 'x'", "line 1"),
    (ACME.replace("forced_cpu", "sometimes_cpu"), "unknown op categories sometimes_cpu"),
    (ACME.replace('"mm",', '"mm(Tensor self)",'), "'mm(Tensor self)' is not an op name"),
    ("x = 1", "no [release] table"),
    (ACME + "\n[[caveat]]\nop = '*'\ndtypes = ['float64']\nkind = 'unsuported'\n",
     "[[caveat]] number 1 kind: 'unsuported' is not one of"),
    (ACME.replace("default_on", "default_onn"), "(line 11): [cpu_fallback] has an unknown key 'default_onn'"),
    (ACME.replace('dispatch_key = "PrivateUse1"', 'dispatch_key = "PrivateUse1"\nfunctionalisation = true'),
     "[release] has an unknown key 'functionalisation'"),
    (ACME.replace('torch = "2.6.0"', 'torch = 2.6'), "[release] torch: 2.6 is not of type 'string'"),
])
def test_malformed_user_matrices_are_refused_clearly(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        load_matrix(str(path))
    assert message in e.value.message and str(path) in e.value.message


def test_release_files_round_trip(acme):
    r = Release.load(acme)
    again = Release.from_toml(r.to_toml("header"), origin="x")
    assert again == r
    m = Matrix(again, load_matrix(str(acme)).torch_ops)
    assert m.resolve("add.Tensor").status == "native"
