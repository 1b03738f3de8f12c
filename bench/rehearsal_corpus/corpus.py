"""Extract the rehearsal corpus (corpus.toml beside this file) from the projects' git repositories.

    python bench/rehearsal_corpus/corpus.py --mirrors /work/.mirror --out /work/ext/rehearsal
    python bench/rehearsal_corpus/corpus.py --manifest bench/heldout_verify/programs.toml \
        --mirrors /work/.mirror --out /work/ext/heldout [--clone]

For each [[project]] of the manifest, reads ``<commit>:<file>`` of every listed file (an entry ending in
``/`` is every file under that folder) from a local clone with ``git --git-dir`` and writes it to
``<out>/<owner>__<name>/<file>``. Clones are looked up as for the held-out lint set (bench/heldout/corpus.py):
``<mirrors>/<owner>+<name>/repo``, ``<mirrors>/<owner>+<name>``, ``<mirrors>/<owner>/<name>.git`` or
``<mirrors>/<owner>/<name>``; ``--clone`` makes a missing one with ``git clone --bare
https://github.com/<owner>/<name> <mirrors>/<owner>+<name>`` first. Nothing of those projects is kept in
this repository.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "heldout"))

from corpus import _git_dir  # noqa: E402  (bench/heldout/corpus.py)

MANIFEST = Path(__file__).with_name("corpus.toml")


def load_manifest(path: Path = MANIFEST) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def project_dir(corpus: Path, project: str) -> Path:
    return corpus / project.replace("/", "__")


def _files(git: Path, commit: str, entry: str) -> list[str]:
    """The entry itself, or every file under it at the commit where it names a folder (ends in ``/``)."""
    if not entry.endswith("/"):
        return [entry]
    listed = subprocess.run(["git", "--git-dir", str(git), "ls-tree", "-r", "--name-only", commit, "--", entry],
                            capture_output=True, text=True)
    return listed.stdout.split()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, default=MANIFEST, help="the programs' manifest (default: corpus.toml)")
    ap.add_argument("--mirrors", type=Path, required=True, help="folder holding the projects' git clones")
    ap.add_argument("--out", type=Path, required=True, help="corpus folder to write")
    ap.add_argument("--clone", action="store_true", help="clone a project missing under --mirrors from GitHub")
    args = ap.parse_args(argv)
    problems, written = [], 0
    for proj in load_manifest(args.manifest)["project"]:
        git = _git_dir(args.mirrors, proj["name"])
        url = f"https://github.com/{proj['name']}"
        if git is None and args.clone:
            dest = args.mirrors / proj["name"].replace("/", "+")
            subprocess.run(["git", "clone", "--bare", "--quiet", url, str(dest)], check=False)
            git = _git_dir(args.mirrors, proj["name"])
        if git is None:
            problems.append(f"{proj['name']}: no clone under {args.mirrors} (git clone --bare {url} "
                            f"{args.mirrors / proj['name'].replace('/', '+')}, or --clone; commit {proj['commit']})")
            continue
        for file in (f for entry in proj["files"] for f in _files(git, proj["commit"], entry)):
            shown = subprocess.run(["git", "--git-dir", str(git), "show", f"{proj['commit']}:{file}"],
                                   capture_output=True)
            if shown.returncode:
                problems.append(f"{proj['name']} {file}: {shown.stderr.decode().strip()}")
                continue
            dest = project_dir(args.out, proj["name"]) / file
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(shown.stdout)
            written += 1
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{written} files written to {args.out}, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
