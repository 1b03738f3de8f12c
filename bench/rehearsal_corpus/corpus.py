"""Extract the rehearsal corpus (corpus.toml beside this file) from the projects' git repositories.

    python bench/rehearsal_corpus/corpus.py --mirrors /work/.mirror --out /work/ext/rehearsal

For each [[project]], reads ``<commit>:<file>`` of every listed file from a local clone with
``git --git-dir`` and writes it to ``<out>/<owner>__<name>/<file>``. Clones are looked up as for the
held-out lint set (bench/heldout/corpus.py): ``<mirrors>/<owner>+<name>/repo``, ``<mirrors>/<owner>+<name>``,
``<mirrors>/<owner>/<name>.git`` or ``<mirrors>/<owner>/<name>``. Nothing of those projects is kept in this
repository.
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirrors", type=Path, required=True, help="folder holding the projects' git clones")
    ap.add_argument("--out", type=Path, required=True, help="corpus folder to write")
    args = ap.parse_args(argv)
    problems, written = [], 0
    for proj in load_manifest()["project"]:
        git = _git_dir(args.mirrors, proj["name"])
        if git is None:
            problems.append(f"{proj['name']}: no clone under {args.mirrors}")
            continue
        for file in proj["files"]:
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
