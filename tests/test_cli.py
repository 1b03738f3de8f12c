"""The command line, run as a user runs it (a fresh process): output, exit codes, files, bad input."""

from __future__ import annotations

import enum
import json
import re
import shutil
import tempfile
import typing
from pathlib import Path

import pytest
import typer
from helpers import FIXTURES, ROOT, run_cli, run_python

MODELS = FIXTURES / "models"
SCRIPTS = FIXTURES / "scripts"


def _no_traceback(err: str) -> None:
    assert "Traceback (most recent call last)" not in err


def test_a_scan_of_a_model_by_name_is_headed_with_its_name():
    """The op table's header named a hf: spec's trace "code" (the header read a file's path or a model's name)."""
    spec = "hf:bert?num_hidden_layers=1&hidden_size=32&num_attention_heads=2&intermediate_size=37"
    code, out, err = run_cli("scan", spec, "-t", "ascend")
    assert code == 0, err[-2000:]
    assert f"{spec}  mode real (" in out and "code  mode" not in out


def test_scan_prints_the_table_and_writes_json(tmp_path):
    out_json = tmp_path / "trace.json"
    code, out, err = run_cli("scan", "examples/model.py", "--train", "--json", str(out_json))
    assert code == 0, err
    assert f"trace written to {out_json}" in err
    assert "examples/model.py  mode real (" in out and "mode:" not in err  # the mode is said once, in the header
    for word in ("forward", "backward", "optimizer", "convolution_backward", "scaled_dot_product_attention",
                 "[choice]", "_foreach_addcdiv_.ScalarList", "examples/model.py:"):
        assert word in out, word
    data = json.loads(out_json.read_text())
    assert data["schema"] == "opaudit-trace" and data["meta"]["train"] is True
    # report reads it back without running the model: the same audit, and with --ops the same op table
    code2, out2, _ = run_cli("report", str(out_json), "--ops")
    assert code2 == 0 and out2 == out
    code3, out3, _ = run_cli("report", str(out_json))
    assert code3 == 0 and out3.startswith("Will it run?") and "forward: " not in out3 and out.endswith(out3)


def test_named_factory_returning_model_and_inputs():
    code, out, err = run_cli("scan", f"{MODELS / 'pair_factory.py'}:tiny")
    assert code == 0, err
    assert "gelu" in out and "addmm" in out


def test_missing_file_is_bad_input():
    code, out, err = run_cli("scan", "does/not/exist.py")
    assert code == 2 and "model file not found: does/not/exist.py" in err
    _no_traceback(err)


def test_file_without_factory_lists_what_it_has():
    code, _, err = run_cli("scan", str(MODELS / "no_factory.py"))
    assert code == 2
    assert "no_factory.py has no function get_model()" in err
    assert "build, make_batch" in err
    _no_traceback(err)
    code, _, err = run_cli("scan", f"{MODELS / 'no_factory.py'}:make")
    assert code == 2 and "has no function make()" in err


def test_factory_that_raises_shows_the_users_frames():
    code, _, err = run_cli("scan", str(MODELS / "raises.py"))
    assert code == 3
    assert "checkpoint weights/layer3.pt not found" in err
    assert "raises.py\", line 6, in get_model" in err and "raises.py\", line 10, in _missing_layer" in err
    assert "site-packages/torch" not in err and "opaudit/" not in err
    _no_traceback(err)


def test_factory_that_calls_sys_exit():
    code, _, err = run_cli("scan", str(MODELS / "exits.py"))
    assert code == 3 and "sys.exit(2)" in err
    _no_traceback(err)


def test_syntax_error_in_the_model_file():
    code, _, err = run_cli("scan", str(MODELS / "syntax_error.py"))
    assert code == 3 and "syntax_error.py, line 3" in err
    _no_traceback(err)


def test_wrong_shape_saves_the_partial_trace(tmp_path):
    out_json = tmp_path / "t.json"
    code, _, err = run_cli("scan", str(MODELS / "wrong_shape.py"), "--json", str(out_json))
    assert code == 3
    assert "the model failed in the forward pass" in err and "mat1 and mat2 shapes cannot be multiplied" in err
    assert "wrong_shape.py\", line 13, in forward" in err
    assert "get_inputs() returns tensors of the shapes" in err
    _no_traceback(err)
    data = json.loads(out_json.read_text())
    assert data["meta"]["status"] == "partial"
    # the failing call is recorded too: it was issued, by `second`
    assert {r["module"] for r in data["records"] if r["op"] == "aten::addmm.default"} == {"first", "second"}


def test_partial_trace_goes_to_a_temporary_folder_without_json(tmp_path):
    code, _, err = run_cli("scan", str(MODELS / "wrong_shape.py"), cwd=tmp_path)
    saved = re.search(r"saved to (\S+opaudit-trace\.partial\.json)", err.replace("\n", ""))
    assert code == 3 and saved, err
    path = Path(saved.group(1))
    assert path.is_file() and path.parent.parent == Path(tempfile.gettempdir())
    assert json.loads(path.read_text())["meta"]["status"] == "partial"
    assert list(tmp_path.iterdir()) == []  # nothing written into the working folder
    shutil.rmtree(path.parent)


def test_unwritable_output(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run_cli("scan", "examples/model.py", "-q", "--json", str(blocker / "t.json"))
    assert code == 2 and "cannot write" in err and "mode:" not in err  # refused before the model ran
    _no_traceback(err)


def test_report_of_a_bad_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "opaudit-trace", "version": 99}')
    code, _, err = run_cli("report", str(bad))
    assert code == 2 and "schema version 99" in err
    bad.write_text("{not json")
    code, _, err = run_cli("report", str(bad))
    assert code == 2 and "is not valid JSON (line 1" in err
    code, _, err = run_cli("report", str(tmp_path / "none.json"))
    assert code == 2 and "trace file not found" in err


def _enum_options() -> list[tuple[list[str], str, type[enum.Enum]]]:
    """Every option of every command whose value is one of an Enum's: (command path, option, the Enum)."""
    from opaudit.cli import app

    def commands(group: typer.Typer, prefix: list[str]):
        for c in group.registered_commands:
            yield [*prefix, c.name or c.callback.__name__.replace("_", "-")], c.callback
        for g in group.registered_groups:
            yield from commands(g.typer_instance, [*prefix, g.name])

    found = []
    for path, fn in commands(app, []):
        for hint in typing.get_type_hints(fn, include_extras=True).values():
            if typing.get_origin(hint) is not typing.Annotated:
                continue
            base, *meta = typing.get_args(hint)
            kinds = [a for a in (typing.get_args(base) or (base,)) if isinstance(a, type) and issubclass(a, enum.Enum)]
            for info in (m for m in meta if isinstance(m, typer.models.OptionInfo)):
                names = [d for d in (info.default, *info.param_decls) if isinstance(d, str) and d.startswith("--")]
                found += [(path, names[0], kind) for kind in kinds]
    return found


def test_a_bad_value_of_any_choice_option_is_one_line_and_exit_2(capsys):
    """Every option that takes one of a fixed set of values (Mode, Amp, Device, FailOn, the formats, the zoo's
    executor), on every command that has it: one line naming the option, the value and the choices, exit 2; no
    validator's prefix ("Value error,"), no usage block, no traceback."""
    from opaudit.cli import main

    options = _enum_options()
    assert {kind.__name__ for _, _, kind in options} >= {"Mode", "Amp", "Device", "FailOn", "LintFormat",
                                                          "RulesFormat", "Executor"}
    for path, option, kind in options:
        model = ["examples/model.py"] if path in (["scan"], ["zoo"]) else []
        with pytest.raises(SystemExit) as exit_:
            main([*path, *model, option, "bogus"])
        out, err = capsys.readouterr()
        assert exit_.value.code == 2, (path, option, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and not out, (path, option, err)
        choices = ", ".join(repr(k.value) for k in kind)
        assert lines[0] == (f"error: {option}: 'bogus' is not one of {choices} "
                            f"(opaudit {' '.join(path)} --help)"), lines


def test_other_usage_errors_are_one_line_too(capsys):
    from opaudit.cli import main

    for args, words in ((["scan", "examples/model.py", "--top", "0"], "--top: the value should be greater than or "
                                                                      "equal to 1"),
                        (["scan", "examples/model.py", "--bogus"], "No such option: --bogus"),
                        (["lint", "--jobs", "x"], "--jobs:")):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"error: {words}") and "Value error" not in err and "Input should" not in err, err
    with pytest.raises(SystemExit) as exit_:  # the command alone: its help, as before
        main(["db"])
    shown = capsys.readouterr()
    assert exit_.value.code == 2 and "Usage: opaudit db" in shown.out + shown.err


def test_trace_runs_a_script_with_its_own_arguments(tmp_path):
    out_json = tmp_path / "s.json"
    code, out, err = run_cli("trace", "--json", str(out_json), "--", str(SCRIPTS / "train_args.py"),
                             "--steps", "2", "--width", "8")
    assert code == 0, err
    assert "done 2 steps width 8" in out
    data = json.loads(out_json.read_text())
    assert data["meta"]["source"]["argv"] == ["--steps", "2", "--width", "8"]
    assert data["meta"]["phases"] == ["forward", "backward", "optimizer"]
    addmm = [r for r in data["records"] if r["op"] == "aten::addmm.default"]
    assert sum(r["calls"] for r in addmm) == 4 and {r["module"] for r in addmm} == {"Sequential.0", "Sequential.2"}
    assert all(r["source"].endswith("train_args.py:15") for r in addmm)


def test_trace_of_a_failing_script(tmp_path):
    code, _, err = run_cli("trace", "--json", str(tmp_path / "p.json"), "--", str(SCRIPTS / "raises_midway.py"))
    assert code == 3 and "raises_midway.py failed: RuntimeError" in err
    assert "raises_midway.py\", line 6, in <module>" in err
    _no_traceback(err)
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["meta"]["status"] == "partial" and any(r["op"] == "aten::mm.default" for r in data["records"])


def test_trace_script_exit_codes():
    code, _, err = run_cli("trace", "-q", "--", str(SCRIPTS / "exit_zero.py"))
    assert code == 0, err
    code, _, err = run_cli("trace", "-q", "--", str(SCRIPTS / "exit_three.py"))
    assert code == 3 and "exited with status 3" in err
    code, _, err = run_cli("trace", "--", "missing_script.py")
    assert code == 2 and "script not found" in err


def test_trace_stops_at_max_ops_and_timeout(tmp_path):
    code, _, err = run_cli("trace", "--max-ops", "500", "--json", str(tmp_path / "a.json"), "--",
                           str(SCRIPTS / "forever.py"))
    assert code == 0 and "stopped after 500 ops" in err
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["meta"]["status"] == "stopped" and data["meta"]["total_calls"] == 500
    code, _, err = run_cli("trace", "--timeout", "2", "--json", str(tmp_path / "b.json"), "--",
                           str(SCRIPTS / "sleepy.py"), timeout=60)
    assert code == 0 and "stopped after 2 s" in err
    assert json.loads((tmp_path / "b.json").read_text())["meta"]["status"] == "stopped"


def test_trace_a_module_with_dash_m():
    code, out, err = run_cli("trace", "-m", "--", "pkg", "--flag", cwd=SCRIPTS)
    assert code == 0, err
    assert "module argv ['--flag']" in out and "neg" in out


def test_version_and_help():
    code, out, _ = run_cli("--version")
    assert code == 0 and out.startswith("opaudit 0.")
    code, out, _ = run_cli("--help")
    assert code == 0 and "scan" in out and "trace" in out and "report" in out


def test_the_bundled_cuda_training_script_traces_its_cuda_path_on_a_cpu(tmp_path):
    out_json = tmp_path / "train.json"
    code, out, err = run_cli("trace", "-q", "--json", str(out_json), "--", "examples/train_cuda.py", "--epochs", "1",
                             "--steps-per-epoch", "2", "--batch-size", "4")
    assert code == 0, err
    assert "epoch 0: loss" in out and "peak memory" in out  # its `if use_cuda:` branches ran
    data = json.loads(out_json.read_text())
    meta = data["meta"]
    assert meta["status"] == "complete" and meta["phases"] == ["forward", "backward", "optimizer"]
    assert meta["source"]["path"] == "examples/train_cuda.py" and meta["device"] == "cuda"
    assert meta["warnings"] == []  # AdamW took CUDA's default, foreach
    device = {r["op"] for r in data["records"] if r["where"] != "host"}
    assert {"aten::convolution_backward.default", "aten::native_batch_norm_backward.default",
            "aten::_amp_foreach_non_finite_check_and_unscale_.default", "aten::_foreach_lerp_.Scalar"} <= device
    assert ["float32->float16"] in [r["dtypes"] for r in data["records"] if r["op"] == "aten::_to_copy.default"]
    choices = {r["op"] for r in data["records"] if r["kind"] == "choice"}
    assert choices == {"aten::batch_norm.default", "aten::dropout.default"}

    code, out, err = run_cli("trace", "-q", "--device", "cpu", "--json", str(out_json), "--", "examples/train_cuda.py",
                             "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "4")
    assert code == 0, err
    meta = json.loads(out_json.read_text())["meta"]
    # on the CPU the script steps AdamW on the CPU: the single-tensor loop, which the trace flags
    assert meta["device"] == "cpu" and any("single-tensor loop" in w for w in meta["warnings"])


def test_files_lint_cannot_read_are_reported_not_crashed_on(tmp_path):
    """A binary file, a file with a NUL byte or a bad coding declaration: one line each, exit 1; fix --diff of a
    file that does not parse fails too (it could not be checked)."""
    (tmp_path / "blob.py").write_bytes(b"\x7fELF\x00\x01 cuda \x00" + bytes(range(256)))
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\nx.cuda()\n")
    (tmp_path / "latin.py").write_bytes(b"\xff\xfe cuda\n")
    (tmp_path / "broken.py").write_text("def f(:\n    x.cuda()\n")
    code, out, err = run_cli("lint", str(tmp_path))
    assert code == 1, err
    text = out + err
    assert "blob.py: not checked: it holds a NUL byte" in text and "nul.py: not checked" in text
    assert "latin.py: not checked: it cannot be decoded" in text and "broken.py:1:" in text
    assert "None" not in text and "internal error" not in text
    code, out, err = run_cli("fix", "--diff", "-t", "ascend", str(tmp_path / "broken.py"))
    assert code == 1 and "does not parse" in out + err


def test_a_spec_whose_library_is_missing_names_the_extra(tmp_path):
    done = run_python("without_transformers.py", "scan", "hf:bert", "-q", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "hf:bert: transformers is not installed" in done.stderr and "opaudit[hf]" in done.stderr
    _no_traceback(done.stderr)


def test_a_zoo_in_which_every_model_failed_fails(tmp_path):
    code, out, err = run_cli("zoo", str(ROOT / "tests" / "fixtures" / "models" / "raises.py"), "--no-cache",
                             "--out", str(tmp_path / "zoo"), cwd=tmp_path)
    assert code == 3 and "every model failed (1)" in err
    assert (tmp_path / "zoo" / "zoo.csv").is_file()  # the reports are written first
