"""Re-create the held-out lint corpus from the projects' git repositories.

    python bench/heldout/corpus.py --mirrors /work/.mirror --out /work/ext/heldout

For each file in labels.toml, reads ``<commit>:<path>`` from a local clone of the project with
``git --git-dir``, writes it to ``<out>/<owner>__<name>/<path>`` and checks its sha256. A clone is
looked up as ``<mirrors>/<owner>+<name>/repo``, ``<mirrors>/<owner>+<name>``, ``<mirrors>/<owner>/<name>.git``
or ``<mirrors>/<owner>/<name>`` (bare or not); clone the ones you lack first, e.g.
``git clone --bare https://github.com/<owner>/<name> <mirrors>/<owner>/<name>.git``.
Nothing of those projects is kept in this repository.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

LABELS = Path(__file__).with_name("labels.toml")


def load_labels(path: Path = LABELS) -> list[dict[str, Any]]:
    with open(path, "rb") as f:
        files: list[dict[str, Any]] = tomllib.load(f)["file"]
    return files


def local_path(corpus: Path, entry: dict[str, Any]) -> Path:
    """Where a labelled file lives in the corpus folder."""
    return corpus / entry["project"].replace("/", "__") / entry["path"]


def _git_dir(mirrors: Path, project: str) -> Path | None:
    owner, name = project.split("/")
    for cand in (mirrors / f"{owner}+{name}" / "repo", mirrors / f"{owner}+{name}",
                 mirrors / owner / f"{name}.git", mirrors / owner / name):
        if (cand / "HEAD").is_file() or (cand / ".git").exists():
            return cand / ".git" if (cand / ".git").is_dir() else cand
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirrors", type=Path, required=True, help="folder holding the projects' git clones")
    ap.add_argument("--out", type=Path, required=True, help="corpus folder to write")
    args = ap.parse_args(argv)
    problems = []
    for entry in load_labels():
        git = _git_dir(args.mirrors, entry["project"])
        if git is None:
            problems.append(f"{entry['project']}: no clone under {args.mirrors}")
            continue
        shown = subprocess.run(["git", "--git-dir", str(git), "show", f"{entry['commit']}:{entry['path']}"],
                               capture_output=True)
        if shown.returncode:
            problems.append(f"{entry['project']} {entry['path']}: {shown.stderr.decode().strip()}")
            continue
        if hashlib.sha256(shown.stdout).hexdigest() != entry["sha256"]:
            problems.append(f"{entry['project']} {entry['path']}: sha256 differs")
            continue
        dest = local_path(args.out, entry)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(shown.stdout)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(load_labels()) - len(problems)} files written to {args.out}, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
