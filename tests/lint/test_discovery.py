"""Which files lint and fix walk, as ruff walks them: .gitignore (inside a git work tree), .ignore and
.git/info/exclude respected, virtual environments and site-packages never entered, exclude /
extend-exclude in [tool.opaudit], --force-exclude for files named on the command line,
--no-respect-gitignore. A real `git init` makes the work tree."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest
from helpers import run_cli

from opaudit.lint import Settings, run
from opaudit.lint.engine import collect

SRC = 'import torch\nx = torch.ones(2, device="cuda")\ntorch.cuda.synchronize()\n'


def _tree(root: Path) -> Path:
    for rel in ("train.py", "env/bin/activate_this.py", "env/lib/python3.11/site-packages/pkg/mod.py",
                "pkg/model.py", "pkg/gen/out.py",
                "pkg/keep_gen.py", "pkg/x_gen.py", "build_cache/x.py", "notes/draft.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(SRC)
    return root


def _names(files: list[Path], root: Path) -> set[str]:
    return {p.resolve().relative_to(root.resolve()).as_posix() for p in files}


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = _tree(tmp_path / "repo")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("env/\nbuild_cache/\n")
    (root / "pkg" / ".gitignore").write_text("gen/\n*_gen.py\n!keep_gen.py\n")
    (root / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text("notes/\n")
    return root


def test_gitignore_ignore_and_git_exclude_are_respected(repo):
    files, _, _ = collect([repo])
    assert _names(files, repo) == {"train.py", "pkg/model.py", "pkg/keep_gen.py"}
    files, _, _ = collect([repo], respect_gitignore=False)
    names = _names(files, repo)
    assert {"env/bin/activate_this.py", "notes/draft.py", "pkg/gen/out.py", "pkg/x_gen.py"} <= names
    assert "env/lib/python3.11/site-packages/pkg/mod.py" not in names  # site-packages: never


def test_fix_of_a_checkout_leaves_its_ignored_virtualenv_alone(repo, monkeypatch):
    monkeypatch.chdir(repo)
    ignored = repo / "env/lib/python3.11/site-packages/pkg/mod.py"
    before = hashlib.sha256(ignored.read_bytes()).hexdigest()
    code, out, err = run_cli("fix", "--target", "ascend", ".", cwd=repo)
    assert code == 0, err
    assert b"npu" in (repo / "train.py").read_bytes()
    assert hashlib.sha256(ignored.read_bytes()).hexdigest() == before


def test_a_virtualenv_is_never_walked_even_outside_git(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(SRC)
    venv.create(root / "myenv", with_pip=False)
    site = next((root / "myenv").rglob("site-packages"))
    (site / "dep.py").write_text(SRC)
    (root / "vendor" / "site-packages").mkdir(parents=True)
    (root / "vendor" / "site-packages" / "x.py").write_text(SRC)
    files, _, _ = collect([root], respect_gitignore=False)
    assert _names(files, root) == {"train.py"}


def test_an_ignore_file_counts_outside_git_and_gitignore_does_not(tmp_path):
    root = _tree(tmp_path / "plain")
    (root / ".gitignore").write_text("pkg/\n")
    (root / ".ignore").write_text("notes/\n")
    names = _names(collect([root])[0], root)
    assert "pkg/model.py" in names and "notes/draft.py" not in names


def test_force_exclude_applies_to_files_named_on_the_command_line(repo, monkeypatch):
    monkeypatch.chdir(repo)
    named = [Path("notes/draft.py"), Path("env/lib/python3.11/site-packages/pkg/mod.py"), Path("train.py")]
    assert len(collect(named)[0]) == 3  # named explicitly: taken as they are
    assert _names(collect(named, force_exclude=True)[0], repo) == {"train.py"}
    code, out, _ = run_cli("lint", "--force-exclude", "notes/draft.py", cwd=repo)
    assert code == 0 and "OA" not in out


def test_exclude_replaces_the_defaults_and_extend_exclude_adds(tmp_path):
    root = _tree(tmp_path / "cfg")
    (root / "dist").mkdir()
    (root / "dist" / "y.py").write_text(SRC)
    assert "dist/y.py" not in _names(collect([root])[0], root)  # a default exclusion
    files = collect([root], ["pkg"], defaults=["build_cache"])[0]
    names = _names(files, root)
    assert "dist/y.py" in names and "build_cache/x.py" not in names and "pkg/model.py" not in names
    (root / "pyproject.toml").write_text('[tool.opaudit]\ntarget = "ascend"\nexclude = ["notes"]\n'
                                         'extend-exclude = ["pkg"]\nrespect-gitignore = false\n')
    code, out, _ = run_cli("lint", "--output-format", "json", str(root))
    paths = {os.path.relpath(f["path"], root) for f in __import__("json").loads(out)["findings"]}
    assert "notes/draft.py" not in paths and not any(p.startswith("pkg") for p in paths)
    assert "dist/y.py" in paths


def test_run_takes_the_settings(repo):
    result = run([repo], Settings(target="ascend", respect_gitignore=False), jobs=1)
    assert any("env/" in r.path for r in result.files)
    result = run([repo], Settings(target="ascend"), jobs=1)
    assert not any("env/" in r.path for r in result.files)
