"""`opaudit scan|report --target ...` from the command line: verdicts, report files, --fail-on, bad input."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, run_cli

from opaudit.cli import EXIT_FAIL_ON


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "demo.json"
    code, out, err = run_cli("scan", "examples/model.py", "--train", "--json", str(path), "-q",
                             "-t", "enflame@f17a922-s60", "-t", "cuda")
    assert code == 0, err
    assert "Will it run?" in out and "enflame@f17a922-s60" in out and "cuda@2.14.1" in out
    return path


def test_report_writes_every_format_without_rerunning(demo_trace, tmp_path):
    outs = {"--html": tmp_path / "r.html", "--csv": tmp_path / "r.csv", "--md": tmp_path / "r.md",
            "--audit-json": tmp_path / "r.json"}
    args = [x for k, v in outs.items() for x in (k, str(v))]
    code, out, err = run_cli("report", str(demo_trace), "-t", "enflame@f17a922-s60", "-t", "mps@2.2.0", *args)
    assert code == 0, err
    assert all(p.stat().st_size > 500 for p in outs.values())
    doc = json.loads(outs["--audit-json"].read_text())
    summaries = {t["target"]: t["summary"] for t in doc["targets"]}
    for summary in summaries.values():
        assert summary in " ".join(out.split())  # the terminal states the verdict of the JSON
        assert summary.replace("_", "\\_") in outs["--md"].read_text()
    assert "runs with 4 ops on the CPU fallback" in summaries["enflame@f17a922-s60"]
    assert "native_layer_norm_backward" in out and "examples/model.py:" in out


def test_fail_on_sets_the_exit_code(demo_trace):
    code, _, err = run_cli("report", str(demo_trace), "-t", "enflame@f17a922-s60", "--fail-on", "cpu_fallback")
    assert code == EXIT_FAIL_ON == 1 and "--fail-on cpu_fallback: enflame@f17a922-s60" in err
    code, _, err = run_cli("report", str(demo_trace), "-t", "enflame@f17a922-s60", "--fail-on", "missing")
    assert code == 0, err
    code, _, _ = run_cli("report", str(demo_trace), "-t", "cuda", "--fail-on", "composite")
    assert code == 1  # views and copies are composites even on CUDA


def test_fail_on_unknown_trips_on_what_the_data_cannot_tell(demo_trace):
    """ascend@1.8.1.post1's list is only an upper bound: the ops it lacks are unknown, not missing."""
    code, _, err = run_cli("report", str(demo_trace), "-t", "ascend@1.8.1.post1", "--fail-on", "missing")
    assert code == 0, err
    code, _, err = run_cli("report", str(demo_trace), "-t", "ascend@1.8.1.post1", "--fail-on", "unknown")
    assert code == EXIT_FAIL_ON and "--fail-on unknown: ascend@1.8.1.post1" in err


def test_fail_on_levels_match_the_audit():
    from opaudit.auditing import FAIL_ON
    from opaudit.cli import FailOn

    assert tuple(f.value for f in FailOn) == FAIL_ON
    code, out, _ = run_cli("report", "--help")
    assert "worst first: missing, version_skew, unknown, cpu_fallback, composite" in " ".join(out.split())


def test_bad_target_and_unwritable_output_fail_before_tracing(tmp_path):
    code, out, err = run_cli("scan", "examples/model.py", "-t", "ascnd")
    assert code == 2 and "unknown target vendor 'ascnd'" in err and "ascend" in err
    assert "mode:" not in err and out == ""  # refused before the model was traced
    code, _, err = run_cli("scan", "examples/model.py", "--html", str(tmp_path))
    assert code == 2 and "is a directory" in err and "mode:" not in err
    code, _, err = run_cli("scan", "examples/model.py", "--html", "/proc/x.html")  # a folder no file can be made in
    assert code == 2 and "cannot write /proc/x.html" in err and "mode:" not in err
    code, _, err = run_cli("scan", "examples/model.py", "--json", "/dev/null")  # a device file
    assert code == 2 and "not a regular file" in err and "mode:" not in err
    code, _, err = run_cli("scan", "examples/model.py", "--no-audit", "-t", "cuda")
    assert code == 2 and "--no-audit" in err
    code, _, err = run_cli("scan", "examples/model.py", "--no-audit", "--lint", "examples")  # lint goes in the report
    assert code == 2 and "--no-audit cannot be combined with" in err and "--lint" in err and "mode:" not in err
    assert "Traceback" not in err


def test_a_model_that_is_not_there_is_refused_before_the_cpp_parts_are_built(tmp_path):
    # build folders that do not exist yet: a first use would build both parts there (25-60 s) before a model ran
    env = {"OPAUDIT_CUDA_STAND_IN_BUILD": str(tmp_path / "stand-in"), "OPAUDIT_TRACER_BUILD": str(tmp_path / "tracer")}
    for model, said in [("nope.py", "model file not found: nope.py"), (str(tmp_path), "is a folder"),
                        ("hf:acme/absent-model", "not in the local Hugging Face cache")]:
        code, out, err = run_cli("scan", model, "-q", env={**env, "HF_HUB_CACHE": str(tmp_path / "hub")})
        assert code == 2 and said in err and "Traceback" not in err, err
        assert "compiling" not in err and not (tmp_path / "stand-in").exists() and not (tmp_path / "tracer").exists()


def test_a_script_that_is_not_there_is_refused_before_the_rehearsal_device_is_built(tmp_path):
    env = {"OPAUDIT_REHEARSAL_DEVICE_BUILD": str(tmp_path / "device")}
    code, _, err = run_cli("run", "--simulate", "ascend", "--", "nope.py", cwd=tmp_path, env=env, fresh=True)
    assert code == 2 and "script not found: nope.py" in err and "Traceback" not in err, err
    assert "compiling" not in err and not (tmp_path / "device").exists()


def test_trace_of_another_schema_version(tmp_path, demo_trace):
    doc = json.loads(demo_trace.read_text())
    doc["version"] = 99
    future = tmp_path / "future.json"
    future.write_text(json.dumps(doc))
    code, _, err = run_cli("report", str(future), "-t", "cuda", "--html", str(tmp_path / "x.html"))
    assert code == 2 and "schema version 99" in err and "Traceback" not in err
    assert not (tmp_path / "x.html").exists()


def test_a_user_matrix_is_a_target(demo_trace, tmp_path):
    matrix = tmp_path / "chip.toml"
    matrix.write_text((FIXTURES / "matrices" / "chip.toml").read_text())
    code, out, err = run_cli("report", str(demo_trace), "--matrix", str(matrix), "--fail-on", "missing")
    assert code == 1, err
    assert "chip@1.0" in out and "fails:" in out


def test_lint_findings_join_the_html_report(demo_trace, tmp_path):
    odd = tmp_path / "<b>odd.py"
    odd.write_text("import torch\ntorch.cuda.synchronize()\n")
    html = tmp_path / "r.html"
    code, out, err = run_cli("report", str(demo_trace), "-t", "cambricon", "--lint", "examples/train_cuda.py",
                             "--lint", str(odd), "--html", str(html))
    assert code == 0, err
    assert "lint (cambricon): 17 findings" in out
    page = html.read_text()
    table = page[page.index('id="lint"'):page.index("<h2>Trace</h2>")]
    assert table.count("<tr>") == 1 + 17 and "examples/train_cuda.py:89:41" in table and "OA301" in table
    assert "torch.mlu.set_device" in table  # the replacements of the audited vendor
    assert "&lt;b&gt;odd.py:2:1" in table and "<b>odd" not in table  # file names are text
    code, _, err = run_cli("report", str(demo_trace), "--lint", str(tmp_path / "missing.py"))
    assert code == 2 and "--lint" in err
