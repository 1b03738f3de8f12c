"""opaudit.fallback.install on a real PrivateUse1 backend: the C++ test backend (tests/fixtures/plugins/testdev),
registered as "npu", which the target "ascend" resolves to through coverage_db.

A process renames PrivateUse1 once, so every scenario runs in a fresh process
(tests/fixtures/fallback/install_driver.py SCENARIO); one run per scenario serves the tests that read it.
The backend is compiled once per machine (conftest.py's testdev_built); without g++ these tests skip.

Tolerances against the CPU, after the first backward: the CPU round trip runs the CPU's own kernels on
the same data, so round-tripped ops are bit for bit the CPU's; differences come from the decompositions
alone (batch norm, var_mean, layer norm's backward: float32 sums in another order, ~1e-7 relative per op,
as check_numerics shows), which backward can amplify. Gradients must agree to 1e-4 of the tensor's
largest value (+1e-6 absolute, for gradients that are rounding noise around zero, such as the bias of a
convolution that batch norm follows): a margin of ~1000x over what is observed, and ~10^6x below what a
broken forward/backward pair or a lost copy-back gives. After two AdamW steps, parameters are compared
with an absolute 4 lr: Adam moves each parameter by about lr whatever the size of its gradient, so a
noise-level gradient (the biases above, the attention's key bias) whose sign differs between the two
runs puts them up to 2 lr apart per step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import FIXTURES, ROOT, SUBPROCESS, run_cli, run_python

from opaudit.fallback.stats import Stats

DRIVER = FIXTURES / "fallback" / "install_driver.py"
PLUGINS = FIXTURES / "plugins"
LOSS_RTOL = 1e-5
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6
PARAM_ATOL_LR, PARAM_RTOL = 4, 1e-4
FALLBACK_PATHS = {"decomposition", "cpu"}


def _result(stdout: str) -> dict:
    """The driver's JSON: its last line that is one (opaudit run prints its summary after the script)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON result in the output:\n{stdout[-3000:]}")


def drive(*args: str, env: dict | None = None, with_pth: bool = False) -> dict:
    """The driver's SCENARIO in a fresh process; ``with_pth``: after opaudit's .pth file, as site-packages runs it."""
    cmd = [sys.executable, *([str(SUBPROCESS / "with_pth.py")] if with_pth else []), str(DRIVER), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return _result(proc.stdout)


@pytest.fixture(scope="module")
def train(testdev_built) -> dict:
    return drive("train")


@pytest.fixture(scope="module")
def native(train) -> dict:
    ops = {op: [m for m, run in train["runs"].items() if op in run["ops"]] for op in _fallen(train)}
    decomposed = sorted({o["op"] for o in train["stats"]["ops"] if o["path"] == "decomposition"})
    return drive("native", json.dumps({"ops": ops, "decomposed": decomposed}))


@pytest.fixture(scope="module")
def pairs(testdev_built) -> dict:
    return drive("pairs")


@pytest.fixture(scope="module")
def roundtrip(testdev_built) -> dict:
    return drive("roundtrip")["checks"]


@pytest.fixture(scope="module")
def knobs(testdev_built) -> dict:
    return drive("knobs")["knobs"]


def _fallen(result: dict) -> set[str]:
    return {o["op"] for o in result["stats"]["ops"]}


def _paths(stats: list[list]) -> dict[str, set[str]]:
    """op -> the paths it took, from [op, path, calls, ...] rows."""
    out: dict[str, set[str]] = {}
    for op, path, *_ in stats:
        out.setdefault(op, set()).add(path)
    return out


def assert_grads_match(grads: dict) -> None:
    for name, d in grads.items():
        assert d["max_abs_diff"] <= GRAD_ATOL + GRAD_RTOL * d["ref_max_abs"], (name, d)


def assert_trains_like_the_cpu(run: dict) -> None:
    loss = run["loss"]
    assert loss["on"] == "npu:0"
    assert abs(loss["device"] - loss["cpu"]) <= LOSS_RTOL * abs(loss["cpu"]), loss
    assert_grads_match(run["grads"])
    for name, d in run["state"].items():  # parameters and batch-norm statistics after two AdamW steps
        assert d["max_abs_diff"] <= PARAM_ATOL_LR * run["lr"] + PARAM_RTOL * d["ref_max_abs"], (name, d)
    assert run["devices"] == ["npu:0"]


# -- 1. a train step --------------------------------------------------------------------------------------
def test_without_the_fallback_a_train_step_fails_as_on_a_real_plugin(train):
    """The plugin lacks kernels: the step stops with torch's NotImplementedError, naming an aten op."""
    err = train["without"]
    assert err is not None and err["type"] == "NotImplementedError", err
    assert "Could not run 'aten::" in err["message"] or "not implemented" in err["message"], err
    named = [op for op in train["missing"] if op.split(".")[0] in err["message"]]
    assert named, err  # convolution_overrideable: the stub a backend overrides, here the first op it lacks


def test_target_resolves_to_the_live_device(train):
    assert train["target"].startswith("ascend@") and train["device_type"] == "npu" and train["key"] == "PrivateUse1"
    assert set(train["registered"]) <= set(train["missing"]) and len(train["registered"]) > 100
    assert {"relu", "native_batch_norm", "convolution_overrideable", "bmm.out"} <= set(train["missing"])
    assert not {"add.out", "mul.out", "mm.out", "empty.memory_format", "_copy_from"} & set(train["missing"])


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_train_step_with_the_fallback_matches_the_cpu(train, model):
    """Forward, backward and two AdamW steps on the device, beside the same model on the CPU."""
    run = train["runs"][model]
    assert_trains_like_the_cpu(run)
    ops = set(run["ops"])
    # what each model is there to exercise reached the fallback, both ways
    expected = {
        "cnn": {"convolution_overrideable", "convolution_backward_overrideable", "native_batch_norm",
                "native_batch_norm_backward", "relu", "max_pool2d_with_indices.out", "addmm.out",
                "_log_softmax.out", "nll_loss_forward.output", "addcdiv.out"},
        "transformer": {"embedding_dense_backward", "native_layer_norm_backward", "gelu.out",
                        "gelu_backward.grad_input", "_softmax.out", "_softmax_backward_data.out", "bmm.out",
                        "addcdiv.out"},
    }[model]
    assert expected <= ops, sorted(expected - ops)


# -- 2. the statistics ------------------------------------------------------------------------------------
def test_statistics_name_only_ops_the_dispatcher_lacked(train):
    st = train["stats"]
    assert st["kind"] == "installed" and st["device"] == "npu" and st["target"] == train["target"]
    missing, forced = set(train["missing"]), set(train["forced"])
    assert not forced
    for o in st["ops"]:
        assert o["op"] in missing | forced, o
        assert o["path"] in FALLBACK_PATHS and o["calls"] > 0 and o["seconds"] > 0, o
        if o["path"] == "cpu":
            assert o["to_host"] > 0 and o["to_device"] > 0 and o["reason"], o
        else:  # a decomposition runs on the device: it moves nothing itself
            assert o["to_host"] == o["to_device"] == 0, o
    assert not st["errors"]
    # the ops each model saw, together, are the ops counted
    assert set().union(*(run["ops"] for run in train["runs"].values())) == _fallen(train)
    # views: most calls first; the summary adds up; the JSON comes back as it was
    by_key = {(o["op"], o["path"]): o["calls"] for o in st["ops"]}
    assert sorted(map(tuple, train["fallen_back"])) == sorted(by_key)
    calls = [by_key[(op, path)] for op, path in train["fallen_back"]]
    assert calls == sorted(calls, reverse=True)
    for path, row in st["summary"].items():
        assert row["calls"] == sum(o["calls"] for o in st["ops"] if o["path"] == path)
    assert Stats.from_json(st).to_json() == st
    assert train["lines"][0].startswith(f"fallback on {train['target']} (installed, device npu)")


def test_native_kernels_for_exactly_the_listed_ops_leave_nothing_to_fall_back(train, native):
    """Independently of the statistics: with testdev's C++ kernels for the ops they list (enable_native,
    before install), the fallback sees none of them and nothing else, and the steps still match the CPU."""
    listed = _fallen(train)
    unrunnable = set(native["unrunnable"])
    assert unrunnable == {"convolution_backward_overrideable"}  # see the driver: the one stub testdev cannot run
    assert set(native["enabled"]) == listed - unrunnable
    assert native["missing_native"] == []
    assert set(_paths(native["stats"])) == unrunnable
    for run in native["runs"].values():
        assert_trains_like_the_cpu(run)
    # and without opaudit at all: the transformer (no convolution) runs on those C++ kernels alone
    assert native["without_fallback"] == {"transformer": None}


def test_every_listed_op_reached_the_fallback(train, native):
    """Each op the statistics list, lacking its kernel again, reaches the fallback: alone when the step
    calls it; else when the ops whose decompositions call it (and their backward partners) lack theirs."""
    unrunnable = set(native["unrunnable"])
    calls: dict[str, int] = {}
    for o in train["stats"]["ops"]:
        calls[o["op"]] = calls.get(o["op"], 0) + o["calls"]
    inner_ok = {*native["inner_lacking"], *unrunnable}
    direct = set()
    for op in _fallen(train) - unrunnable:
        alone = native["alone"][op]
        assert not alone["failed"], (op, alone)
        assert set(alone["stats"]) <= {op} | unrunnable, (op, alone)
        if op in alone["stats"]:
            direct.add(op)
            assert 0 < alone["stats"][op] <= calls[op], (op, alone, calls[op])
        else:
            inner = native["inner"][op]
            assert not inner["failed"], (op, inner)
            assert op in inner["stats"] and set(inner["stats"]) <= {op} | inner_ok, (op, inner)
    # what the step calls itself; a decomposition runs only where the ops it emits exist (Chooser.confirm),
    # so on the minimal backend the ops that fall back are all ones the step reaches itself
    assert {"convolution_overrideable", "native_batch_norm", "relu", "bmm.out", "gelu.out"} <= direct
    assert not native["inner"]
    assert {"var_mean.correction", "rsqrt.out", "where.self"}.isdisjoint(_fallen(train))


# -- 3. forward/backward pairs ----------------------------------------------------------------------------
def test_a_forward_backward_pair_is_decomposed_together(pairs):
    choices = pairs["default"]
    assert choices["native_batch_norm"]["path"] == choices["native_batch_norm_backward"]["path"] == "decomposition"
    assert "native_batch_norm_backward" in choices["native_batch_norm"]["reason"]
    paths = _paths(pairs["default_run"]["stats"])
    assert paths["native_batch_norm"] == paths["native_batch_norm_backward"] == {"decomposition"}
    assert_grads_match(pairs["default_run"]["grads"])


@pytest.mark.parametrize("forced,partner", [("native_batch_norm", "native_batch_norm_backward"),
                                            ("native_batch_norm_backward", "native_batch_norm")])
def test_forcing_one_side_of_a_pair_to_the_cpu(pairs, forced, partner):
    """force_cpu sends the op through the CPU (counted, bytes moved) and the step still matches the CPU;
    its partner must then take the same path: a pair is decomposed together or not at all (choose.py)."""
    run = pairs[f"forced {forced}"]
    assert run["choices"][forced] == {"path": "cpu", "reason": "sent to the CPU by the user"}
    rows = {(op, path): (calls, to_host, to_device) for op, path, calls, to_host, to_device in run["stats"]}
    calls, to_host, to_device = rows[(forced, "cpu")]
    assert calls == 1 and to_host > 0 and to_device > 0
    assert_grads_match(run["grads"])
    partner_paths = _paths(run["stats"])[partner]
    assert partner_paths == {"cpu"} and run["choices"][partner]["path"] == "cpu", run["choices"]


# -- 4. uninstall -----------------------------------------------------------------------------------------
def test_uninstall_restores_the_dispatcher(train):
    assert train["kernel_while_installed"] and all(train["kernel_while_installed"].values())
    assert set(train["kernel_after_uninstall"]) == _fallen(train)
    assert not any(train["kernel_after_uninstall"].values()), train["kernel_after_uninstall"]
    assert train["registrations_restored"] and train["missing_restored"]
    assert not train["current_after_uninstall"]
    assert train["again"] == train["without"]  # the same step fails again, the same way


def test_install_twice_is_refused_and_the_context_manager_uninstalls(train):
    assert train["twice"]["type"] == "InputError" and "already installed" in train["twice"]["message"]
    assert train["first_still_installed"]
    assert train["in_context"] is None  # the step ran inside the with block
    assert train["context_uninstalled"]
    assert train["after_context"] == train["without"]


# -- 5. the CPU round trip on device tensors --------------------------------------------------------------
def test_round_trip_in_place(roundtrip):
    """x.abs_() reaches abs.out (out=self): the caller's tensor is written and returned, not a copy."""
    assert roundtrip["inplace"] == {"missing": True, "same_object": True, "same_storage": True, "equal": True,
                                    "path": [["cpu", 1]]}
    assert roundtrip["inplace_view"] == {"equal": True, "device": "npu:0"}  # through a non-contiguous view


def test_round_trip_out_variant_resizes_out(roundtrip):
    assert roundtrip["out"] == {"missing": True, "same_object": True, "shape": [3, 4], "equal": True,
                                "device": "npu:0", "path": [["cpu", 1]]}


def test_round_trip_view_aliases_its_input(roundtrip):
    """unfold (missing; forced to the CPU path): the result is a view of the device tensor, not a copy."""
    v = roundtrip["view"]
    assert v["missing"] and v["path"] == [["cpu", 1]]
    assert v["aliases"] and v["sees_write"] and v["equal"]
    assert (v["shape"], v["stride"], v["device"]) == ([4, 3], [2, 1], "npu:0")


def test_round_trip_view_that_changes_the_dtype(roundtrip):
    v = roundtrip["view_dtype"]
    assert v["missing"]
    failed = v["failed"]
    assert failed is None, failed
    assert (v["dtype"], v["shape"], v["equal"]) == ("torch.float32", [3, 2], True)


def test_round_trip_keeps_strides_dtypes_and_the_device_index(roundtrip):
    nc = roundtrip["noncontiguous"]
    assert not nc["input_contiguous"] and nc["equal"] and nc["shape"] == [4, 3]
    assert nc["stride"] == nc["cpu_stride"] == [1, 4]  # the CPU kernel's layout for a transposed input
    assert roundtrip["strided"] == {"equal": True}
    assert roundtrip["dtype"] == {"float16": ["torch.float16", True], "int64": ["torch.int64", True],
                                  "int64_abs": ["torch.int64", True]}
    idx = roundtrip["index"]
    assert idx["current"] == 0 and idx["equal"]
    assert idx["exp"] == idx["sum"] == "npu:1" and idx["max"] == ["npu:1", "npu:1"]


def test_round_trip_several_results_and_a_scalar(roundtrip):
    assert roundtrip["multi"]["max"] == ["npu:0", "npu:0", "torch.int64", True, True]
    assert roundtrip["multi"]["topk"] == ["npu:0", "npu:0", True, True]
    s = roundtrip["scalar"]
    assert s["missing"] and s["item"] == s["cpu"]
    # every round trip with device inputs counted the bytes it moved (a view moves nothing back)
    for op, (to_host, to_device) in roundtrip["bytes"].items():
        if op == "view_as_real" and roundtrip["view_dtype"]["failed"]:
            continue  # it failed before its copies were counted (test_round_trip_view_that_changes_the_dtype)
        assert to_host > 0, op
        assert to_device > 0 or op in ("unfold", "view_as_real"), op


# -- 6. the knobs -----------------------------------------------------------------------------------------
def test_force_cpu_sends_an_op_the_device_has_through_the_cpu(knobs):
    assert not knobs["add_missing"] and knobs["registered_add"]  # testdev has add.out in C++
    f = knobs["force_cpu"]
    assert f["equal"] and f["device"] == "npu:0"
    calls, to_host, to_device, reason = f["stat"]
    # x + w on 64x32 float32: both inputs go to the host (out= is only written: allocated there), out comes back
    assert (calls, to_host, to_device, reason) == (1, 2 * 64 * 32 * 4, 64 * 32 * 4, "sent to the CPU by the user")
    assert knobs["add_native_again"] == {"kernel": True, "equal": True}  # uninstall gives the C++ kernel back


def test_forbid_fails_as_the_device_would(knobs):
    err = knobs["forbid"]
    assert err["type"] == "NotImplementedError" and "aten::relu" in err["message"], err
    assert knobs["forbid_stats"] == [["relu", "forbidden", 1]]
    assert knobs["forbid_errors"] == ["relu: fallback forbidden"]
    assert knobs["forbid_other"]  # only relu


def test_check_numerics_fills_max_rel_error(knobs):
    rows = knobs["numerics"]
    assert rows
    for op, path, calls, checked, err in rows:
        assert checked == calls > 0 and err is not None, (op, path)
        if path == "decomposition":  # float32 decompositions; nothing here is ill-conditioned
            assert err < 1e-5, (op, err)
        else:  # the CPU's own kernel on the same data
            assert err < 1e-6, (op, err)
    assert any(path == "decomposition" and err > 0 for _, path, _, _, err in rows)  # it does measure
    for grads in knobs["numerics_grads"].values():
        assert_grads_match(grads)


def test_a_failing_fallback_raises_fallback_failed(knobs):
    assert knobs["user_error"]["type"] == "IndexError"  # raised by torch before dispatch: its own type
    f = knobs["failed"]
    assert f["type"] == "FallbackFailed" and f["cause"] == "IndexError", f
    assert "aten::index.Tensor_out (cpu)" in f["message"] and "ascend@" in f["message"]
    assert f"install_driver.py:{knobs['failing_line']}" in f["message"]
    assert f["errors"] == [f["message"]]
    assert knobs["after_failure"]


def test_force_cpu_of_an_op_the_round_trip_needs_is_refused(knobs):
    """_copy_from moves the round trip's data: sent to the CPU, it would call itself."""
    inf = knobs["infrastructure"]
    assert inf["refused"] and "_copy_from" in inf["refused"], inf


def test_force_cpu_of_no_op_is_refused_and_leaves_the_dispatcher_alone(knobs):
    u = knobs["unknown"]
    assert u["refused"] == "force_cpu: no aten op 'no_such_op'"
    assert not u["current"]
    assert u["restored"]
    assert u["relu"]["type"] == "NotImplementedError"


# -- 7. OPAUDIT_FALLBACK and opaudit run --fallback -------------------------------------------------------
def test_environment_variables_force_cpu_and_forbid(testdev_built, tmp_path):
    """OPAUDIT_FALLBACK_CPU and OPAUDIT_FALLBACK_FORBID reach install() through the .pth (test_autostart.py
    covers OPAUDIT_FALLBACK itself)."""
    if not (ROOT / "opaudit" / "fallback" / "autostart.py").is_file():
        pytest.skip("no opaudit/fallback/autostart.py: the environment variable path does not exist")
    stats = tmp_path / "stats.json"
    env = {"OPAUDIT_FALLBACK": "ascend", "OPAUDIT_FALLBACK_AFTER": "fake_npu_plugin",
           "OPAUDIT_FALLBACK_CPU": "add.out, aten::exp.out", "OPAUDIT_FALLBACK_FORBID": "relu",
           "OPAUDIT_FALLBACK_STATS": str(stats), "PYTHONPATH": str(PLUGINS)}
    r = drive("autostart", env=env, with_pth=True)
    assert not r["before_plugin"] and r["installed"]
    assert r["target"].startswith("ascend@") and r["forced"] == ["add.out", "exp.out"] and r["forbidden"] == ["relu"]
    assert r["add"] and r["exp"]
    assert r["relu"]["type"] == "NotImplementedError" and "aten::relu" in r["relu"]["message"]
    paths = {(op, path): calls for op, path, calls, _ in r["stats"]}
    assert paths == {("add.out", "cpu"): 1, ("exp.out", "cpu"): 1, ("relu", "forbidden"): 1}
    saved = json.loads(stats.read_text())  # written at exit
    assert {(o["op"], o["path"]) for o in saved["ops"]} == set(paths)


def test_opaudit_run_fallback_imports_the_targets_plugin(testdev_built, tmp_path):
    """``opaudit run --fallback ascend`` without --import: install() imports the target's own package (here a
    stub torch_npu that registers testdev as npu) and the script, a CNN train step, matches the CPU."""
    stats = tmp_path / "stats.json"
    env = {"PYTHONPATH": os.pathsep.join([str(PLUGINS), str(FIXTURES / "fallback" / "torch_npu_stub")])}
    rc, out, err = run_cli("run", "--fallback", "ascend", "--stats", str(stats), "--", str(DRIVER), "cli", env=env)
    assert rc == 0, err[-3000:]
    r = _result(out)
    assert r["device_registered"]
    assert abs(r["loss"]["device"] - r["loss"]["cpu"]) <= LOSS_RTOL * abs(r["loss"]["cpu"])
    assert_grads_match(r["grads"])
    st = json.loads(stats.read_text())
    assert st["kind"] == "installed" and st["device"] == "npu" and st["target"].startswith("ascend@")
    assert {"convolution_overrideable", "native_batch_norm"} <= {o["op"] for o in st["ops"]}


@pytest.mark.parametrize("package,name,first", [("fallback", "install", "current"),
                                                 ("rehearsal", "simulate", "Simulator")])
def test_the_documented_functions_survive_an_import_of_their_module(package, name, first):
    """``opaudit.fallback.install`` and ``opaudit.rehearsal.simulate`` are the documented functions whatever was
    used before them: here another lazy name of the same submodule, whose import binds the package attribute of
    the submodule's name (no device needed; no submodule is named after a function)."""
    proc = run_python("documented_function.py", package, name, first, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "function"


def test_a_missing_derivatives_yaml_is_said_not_silent(monkeypatch, tmp_path):
    """A PyTorch install without torchgen's derivatives.yaml changes how forward and backward ops are
    paired: the user is told, once, which file and what it changes."""
    import torchgen

    from opaudit.fallback import choose

    monkeypatch.setattr(torchgen, "__file__", str(tmp_path / "torchgen" / "__init__.py"))
    choose.backward_pairs.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"derivatives\.yaml is missing .* no longer sent the same way"):
            assert choose.backward_pairs() == {}
    finally:
        monkeypatch.undo()
        choose.backward_pairs.cache_clear()
    assert "native_batch_norm_backward" in choose.partners("native_batch_norm")  # the real file pairs them
