"""`opaudit lint`, `fix`, `rules` and `explain` as a user runs them: exit codes, selection, formats
(SARIF checked against the SARIF 2.1.0 JSON schema), configuration, stdin, --diff, pre-commit."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import jsonschema
import pytest
import yaml
from helpers import FIXTURES, ROOT, run_cli

SRC = ("import torch\nimport torch.distributed as dist\n\n"
       "def main(local_rank):\n"
       "    torch.cuda.set_device(local_rank)\n"
       "    dist.init_process_group(backend=\"nccl\")\n"
       "    model = Net().cuda()\n"
       "    x = torch.randn(8, 3, device=\"cuda\")\n"
       "    torch.backends.cudnn.benchmark = True\n")
# the SARIF 2.1.0 (rtm.5) JSON schema, a fixture copied from Microsoft's jest-sarif npm package (its SOURCES.md)
SARIF_SHA256 = "2d99159ae54a3eea97f81781cff48780548657c35949f4b7f25e99a2ba4de4f8"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(SRC)
    return tmp_path


def test_lint_exit_codes(project):
    code, out, _ = run_cli("lint", str(project / "train.py"), "-t", "ascend")
    assert code == 1
    for c in ("OA114", "OA301", "OA101", "OA103", "OA601"):
        assert c in out
    assert "train.py:5:5: OA114 [*]" in out and "[?]" in out and "Found 5 findings" in out
    code, out, _ = run_cli("lint", str(project / "train.py"), "--exit-zero")
    assert code == 0 and "OA114" in out
    (project / "clean.py").write_text("import torch\nx = torch.ones(2)\n")
    code, out, _ = run_cli("lint", str(project / "clean.py"))
    assert code == 0 and "All checks passed" in out


def test_select_and_ignore_take_prefixes(project):
    _, out, _ = run_cli("lint", str(project), "--select", "OA1", "-t", "ascend")
    codes = {ln.split()[1] for ln in out.splitlines() if ": OA" in ln}
    assert codes == {"OA114", "OA101", "OA103"}
    _, out, _ = run_cli("lint", str(project), "--ignore", "OA10,OA6", "-t", "ascend")
    codes = {ln.split()[1] for ln in out.splitlines() if ": OA" in ln}
    assert codes == {"OA114", "OA301"}
    code, _, err = run_cli("lint", str(project), "--select", "OA99")
    assert code == 2 and "no rule matches 'OA99'" in err


def test_json_github_and_statistics(project):
    _, out, _ = run_cli("lint", str(project), "-t", "ascend", "--output-format", "json")
    data = json.loads(out)
    assert data["schema"] == "opaudit-lint" and data["target"] == "ascend"
    first = data["findings"][0]
    assert (first["code"], first["line"], first["col"], first["replacement"]) == ("OA114", 5, 5, "torch.npu.set_device")
    _, out, _ = run_cli("lint", str(project), "-t", "ascend", "--output-format", "github")
    assert out.splitlines()[0].startswith("::warning title=opaudit (OA114),file=")
    assert ",line=5,col=5,endLine=5,endColumn=26::OA114 " in out.splitlines()[0]
    _, out, _ = run_cli("lint", str(project), "-t", "ascend", "--statistics")
    assert out.splitlines()[0].split("\t")[:2] == ["1", "OA101"] and len(out.splitlines()) == 5


@pytest.fixture(scope="session")
def sarif_schema():
    data = (FIXTURES / "sarif" / "sarif-2.1.0-rtm.5.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == SARIF_SHA256, "not the SARIF schema this test pins"
    return json.loads(data)


def test_sarif_validates_against_the_schema(project, sarif_schema):
    (project / "bad.py").write_text("torch.cuda.synchronize(\n")
    _, out, _ = run_cli("lint", str(project), "-t", "ascend", "--output-format", "sarif", "--select", "ALL")
    log = json.loads(out)
    jsonschema.validate(log, sarif_schema)
    run = log["runs"][0]
    assert {r["ruleId"] for r in run["results"]} >= {"OA114", "OA301", "OA101", "OA103", "OA601"}
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == {r["ruleId"] for r in run["results"]}
    fixable = [r for r in run["results"] if r["ruleId"] == "OA114"][0]
    assert fixable["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"] == \
        "torch.npu.set_device"
    assert "does not parse" in run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]
    with pytest.raises(jsonschema.ValidationError):  # the schema does reject a broken log
        jsonschema.validate({**log, "version": "2.0"}, sarif_schema)


def test_fix_diff_writes_nothing_then_fix_writes(project):
    path = project / "train.py"
    code, out, err = run_cli("fix", str(path), "-t", "ascend", "--diff")
    assert code == 1 and "+    torch.npu.set_device(local_rank)" in out and "+import torch_npu" in out
    assert "1 file would be changed" in err and path.read_text() == SRC
    assert "train.py:7:13: OA101 [?]" in err and "Would fix 3 findings" in err  # places in the file as it is;
    # the 3 safe findings lint counts (the import torch_npu the rewrites need is part of them)
    code, out, err = run_cli("fix", str(path), "-t", "ascend")
    text = path.read_text()
    assert code == 1 and "Fixed" in out and "OA101" in out  # .cuda() needs --unsafe-fixes; OA601 is a report
    assert 'backend="hccl"' in text and 'device="npu"' in text and "Net().cuda()" in text
    code, out, _ = run_cli("fix", str(path), "-t", "ascend", "--unsafe-fixes", "--ignore", "OA601")
    assert code == 0 and "Net().npu()" in path.read_text()
    code, _, _ = run_cli("fix", str(path), "-t", "ascend", "--diff", "--ignore", "OA601")
    assert code == 0  # nothing left to change


def test_fix_needs_a_target_and_knows_them(project):
    code, _, err = run_cli("fix", str(project))
    assert code == 2 and "name the target" in err
    code, _, err = run_cli("fix", str(project), "-t", "ascned")
    assert code == 2 and "did you mean ascend" in err
    code, _, err = run_cli("lint", str(project / "missing.py"))
    assert code == 2 and "no such file" in err


def test_stdin_to_stdout():
    proc = subprocess.run([*_cli(), "fix", "-", "-t", "cambricon"], input=SRC, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.stdout.startswith("import torch\nimport torch_mlu\n") and 'backend="cncl"' in proc.stdout
    assert proc.returncode == 1 and "OA101" in proc.stderr  # what remains is reported on stderr
    proc = subprocess.run([*_cli(), "lint", "-", "--stdin-filename", "x.py"], input=SRC, capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1 and "x.py:5:5: OA114" in proc.stdout


def _cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "opaudit"]


def test_pyproject_configuration(project):
    (project / "pyproject.toml").write_text('[tool.opaudit]\ntarget = "musa"\nignore = ["OA6"]\n'
                                            'exclude = ["vendored*"]\n')
    (project / "vendored_lib").mkdir()
    (project / "vendored_lib" / "x.py").write_text(SRC)
    code, out, _ = run_cli("lint", str(project))
    assert "torch.musa.set_device" in out and "OA601" not in out and "vendored" not in out
    code, out, _ = run_cli("lint", str(project), "-t", "xpu")  # the command line wins
    assert "torch.xpu.set_device" in out
    (project / "pyproject.toml").write_text('[tool.opaudit]\ntargte = "musa"\n')
    code, _, err = run_cli("lint", str(project))
    assert code == 2 and "has no setting 'targte'" in err


def test_rules_and_explain():
    code, out, _ = run_cli("rules")
    assert code == 0 and len(out.splitlines()) == 105 and out.startswith("OA001  backend-not-imported")
    code, out, _ = run_cli("rules", "--output-format", "json")
    assert len(json.loads(out)) == 105
    code, out, _ = run_cli("explain", "oa301", "-t", "musa")
    assert code == 0 and out.startswith("# OA301 (nccl-backend)") and "musa:mccl" in out and "hccl" not in out
    code, _, err = run_cli("explain", "OA999")
    assert code == 2 and "no rule 'OA999'" in err
    code, _, err = run_cli("rules", "--output-format", "sarif")  # a rule list has no SARIF form: refused
    assert code == 2 and "'sarif' is not one of 'text', 'json'" in err
    code, _, err = run_cli("lint", "--jobs", "0", "examples")
    assert code == 2 and "--jobs" in err


def test_pre_commit_hooks_run_the_commands():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"]: h["entry"] for h in hooks} == {"opaudit-lint": "opaudit lint", "opaudit-fix": "opaudit fix"}
    for h in hooks:
        assert h["language"] == "python" and "python" in h["types_or"]


def test_the_diff_applies_with_git_and_patch(tmp_path):
    """`fix --diff` output is a patch: applied with git apply -p0 (and checked by patch -p0) it writes what
    `fix` writes, also for a file whose last line has no newline and for a change near the end."""
    files = {"tail.py": "import torch\nscaler = torch.cuda.amp.GradScaler()",
             "body.py": "import torch\nx = torch.zeros(2).cuda()\n\n\n\n\ny = 1\n", "clean.py": "y = 1\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, out, err = run_cli("fix", "-t", "ascend", "--diff", *files, cwd=tmp_path)
    assert code == 1 and "\\ No newline at end of file" in out, err
    (tmp_path / "p.diff").write_text(out)
    patch = shutil.which("patch")
    if patch:
        assert subprocess.run([patch, "-p0", "--dry-run", "-i", "p.diff"], cwd=tmp_path).returncode == 0
    assert subprocess.run(["git", "apply", "-p0", "p.diff"], cwd=tmp_path).returncode == 0
    applied = {name: (tmp_path / name).read_text() for name in files}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, _, err = run_cli("fix", "-t", "ascend", *files, cwd=tmp_path)
    assert {name: (tmp_path / name).read_text() for name in files} == applied
    assert applied["tail.py"] != files["tail.py"] and applied["clean.py"] == files["clean.py"]


def test_info_findings_are_shown_and_never_fail(tmp_path):
    """Flags with no effect off CUDA (cudnn.benchmark, cudnn.deterministic, CUBLAS_WORKSPACE_CONFIG) are info:
    shown, counted, never a reason for lint or fix to exit 1; [tool.opaudit] info = [...] chooses them."""
    src = ("import os\nimport torch\ntorch.backends.cudnn.benchmark = False\n"
           "torch.backends.cudnn.deterministic = True\nos.environ[\"CUBLAS_WORKSPACE_CONFIG\"] = \":4096:8\"\n")
    (tmp_path / "train.py").write_text(src)
    code, out, _ = run_cli("lint", str(tmp_path), "-t", "ascend")
    assert code == 0 and out.count(": OA") == 3 and out.count(" info: ") == 4  # (3 findings, and the summary)
    assert "(3 info: no exit 1 for them)" in out
    code, out, _ = run_cli("fix", str(tmp_path), "-t", "ascend")
    assert code == 0 and (tmp_path / "train.py").read_text() == src
    _, out, _ = run_cli("lint", str(tmp_path), "-t", "ascend", "--output-format", "json")
    assert {f["code"]: f["severity"] for f in json.loads(out)["findings"]} == dict.fromkeys(
        ["OA601", "OA602", "OA508"], "info")
    _, out, _ = run_cli("lint", str(tmp_path), "-t", "ascend", "--output-format", "sarif")
    assert {r["level"] for r in json.loads(out)["runs"][0]["results"]} == {"note"}
    (tmp_path / "pyproject.toml").write_text("[tool.opaudit]\ninfo = [\"OA601\"]\n")  # the project decides
    code, out, _ = run_cli("lint", str(tmp_path), "-t", "ascend")
    assert code == 1 and out.count(" info: ") == 2 and "(1 info: no exit 1 for them)" in out
    (tmp_path / "gpu.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    code, _, _ = run_cli("lint", str(tmp_path / "gpu.py"), "-t", "ascend")
    assert code == 1  # a finding that is not info still fails


def test_a_target_table_makes_a_harmless_setting_info_there_only(tmp_path):
    """musa's table names OA604 (torch.backends.cuda.matmul.allow_tf32: a flag of PyTorch's global context,
    harmless on a MUSA build, with no matmul twin in torch_musa) as info: lint and fix exit 0 on musa, while
    ascend, whose table has a twin (torch.npu.matmul.allow_hf32), still reports it as a finding to fix."""
    src = "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
    (tmp_path / "train.py").write_text(src)
    code, out, _ = run_cli("lint", str(tmp_path), "-t", "musa")
    assert code == 0 and "OA604 info: " in out and "(1 info: no exit 1 for them)" in out
    code, _, _ = run_cli("fix", str(tmp_path), "-t", "musa", "--unsafe-fixes")
    assert code == 0 and (tmp_path / "train.py").read_text() == src
    code, out, _ = run_cli("lint", str(tmp_path), "-t", "ascend")
    assert code == 1 and "OA604 info" not in out and "OA604" in out
