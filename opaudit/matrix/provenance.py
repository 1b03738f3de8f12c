"""coverage_db/SOURCES.md: where every release file and every fact of the notes comes from, in public.

``opaudit db build`` writes the page (``page``) from two things the repository carries:
- the ``[[source]]`` tables of the releases it builds: each upstream file read (repository, path, commit, sha256
  of the copy read, what was read) with the releases that use it;
- ``coverage_db/curated/facts.toml``, written by hand: the facts the notes rely on (CPU fallback behaviour,
  switches, dtype facts, counting rules), each with the public place it can be checked, or what the project
  observed itself where no public page states it.
Adapters cite a fact as ``cite("<id>")`` (``coverage_db/SOURCES.md#<id>``); the build refuses a citation whose
id the page does not have, so every cited anchor exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opaudit.data import data_dir, tomllib
from opaudit.matrix.release import Release, Source

PAGE = "SOURCES.md"  # relative to coverage_db/
CITED = re.compile(r"coverage_db/SOURCES\.md#([a-z0-9-]+)")
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
VENDORS = {  # section titles, in page order
    "pytorch": "PyTorch", "xla": "PyTorch/XLA", "xpu": "Intel GPU (XPU)", "musa": "Moore Threads MUSA",
    "cambricon": "Cambricon", "ascend": "Huawei Ascend", "dipu": "DeepLink DIPU", "biren": "Biren",
    "enflame": "Enflame", "sophgo": "Sophgo",
}


def cite(fact: str) -> str:
    """How a note or caveat names a fact of the page."""
    return f"coverage_db/{PAGE}#{fact}"


def page_path() -> Path:
    """The page where it is installed (inside the package when installed from a wheel)."""
    return data_dir("coverage_db") / PAGE


def described(release: Release) -> bool:
    """Whether the page describes ``release``: a coverage_db release (built from staged files) or one citing it."""
    texts = [release.accuracy, release.fallback.note, *release.notes, *(c.source for c in release.caveats)]
    return any(s.staged for s in release.sources) or any(CITED.search(t) for t in texts)


def public_sources(releases: Iterable[Release]) -> None:
    """Point caveat sources that name a staged copy (a path under the sources folder, which users do not have) at
    the copy's public origin instead: repository, path and commit, and the page's section of that repository."""
    for r in releases:
        staged = {s.staged: s for s in r.sources if s.staged}
        for c in r.caveats:
            src = staged.get(c.source)
            if src is not None:
                at = f" @ {src.commit[:12]}" if src.commit else ""
                c.source = f"{src.repo} {src.path}{at} ({cite(repo_anchor(src.repo))})"


def repo_anchor(repo: str) -> str:
    return f"files-{_slug(repo)}"


def facts_file() -> Path:
    return data_dir("coverage_db") / "curated" / "facts.toml"


@dataclass
class Fact:
    id: str
    vendor: str
    title: str
    text: str
    origins: list[dict[str, Any]] = field(default_factory=list)
    observed: str = ""


def load_facts(path: Path | None = None) -> list[Fact]:
    """The facts of ``facts.toml``, checked: unique ids fit for an anchor, a known vendor, an origin or an
    observation each, and every origin a repository file, a thread or a URL."""
    path = path or facts_file()
    with open(path, "rb") as f:
        raw = tomllib.load(f).get("fact", [])
    facts, seen = [], set()
    for e in raw:
        fact = Fact(**e)
        where = f"{path.name}: fact {fact.id!r}"
        if not _ID.match(fact.id) or fact.id in seen:
            raise ValueError(f"{where}: ids are unique, lower-case words joined by '-'")
        if fact.vendor not in VENDORS:
            raise ValueError(f"{where}: unknown vendor {fact.vendor!r} (one of {', '.join(VENDORS)})")
        if not fact.origins and not fact.observed:
            raise ValueError(f"{where}: needs a public origin or what the project observed")
        for o in fact.origins:
            if not ("url" in o or ("repo" in o and ("path" in o or "issue" in o or "pr" in o))):
                raise ValueError(f"{where}: an origin is {{repo, path}}, {{repo, issue}}, {{repo, pr}} or {{url}}")
        seen.add(fact.id)
        facts.append(fact)
    return facts


def citations(files: Mapping[str, str]) -> dict[str, set[str]]:
    """fact id -> the generated files (relative paths) that cite it."""
    out: dict[str, set[str]] = {}
    for rel, text in files.items():
        for m in CITED.finditer(text):
            out.setdefault(m.group(1), set()).add(rel)
    return out


def _origin(o: dict[str, Any]) -> str:
    if "url" in o:
        text = f"<{o['url']}>"
    elif "issue" in o or "pr" in o:
        kind, num = ("issues", o["issue"]) if "issue" in o else ("pull", o["pr"])
        text = f"[{o['repo']}#{num}](https://github.com/{o['repo']}/{kind}/{num})"
    else:
        ref = o.get("ref")
        if ref:
            kind = "tree" if o["path"].endswith("/") else "blob"
            url = f"https://github.com/{o['repo']}/{kind}/{ref}/{o['path']}"
            text = f"{o['repo']}: [`{o['path']}`]({url}) at `{ref[:12] if _is_sha(ref) else ref}`"
        else:
            text = f"{o['repo']}: `{o['path']}`"
    return text + (f" ({o['what']})" if o.get("what") else "")


def _is_sha(ref: str) -> bool:
    return bool(re.fullmatch(r"[0-9a-f]{40}", ref))


def _file_link(src: Source) -> str:
    if src.repo.startswith("pypi:"):
        project = src.repo.split(":", 1)[1]
        return f"[PyPI {project}](https://pypi.org/project/{project}/): `{src.path}`"
    if src.commit:
        return f"[`{src.path}`](https://github.com/{src.repo}/blob/{src.commit}/{src.path})"
    return f"`{src.path}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _used_by(keys: Iterable[str]) -> str:
    by_vendor: dict[str, list[str]] = {}
    for k in keys:
        vendor, name = k.split("@", 1)
        by_vendor.setdefault(vendor, []).append(name)
    return "; ".join(f"{v}@{', '.join(names)}" for v, names in sorted(by_vendor.items()))


def page(files: Mapping[str, str], releases: list[Release], facts: list[Fact] | None = None) -> str:
    """The text of coverage_db/SOURCES.md for the generated ``files`` (relative path -> text) and ``releases``."""
    facts = load_facts() if facts is None else facts
    repos = {s.repo for r in releases for s in r.sources}
    known = {f.id for f in facts} | {"facts", "files-read"} | {repo_anchor(repo) for repo in repos}
    cited = citations(files)
    unknown = sorted(set(cited) - known)
    if unknown:
        raise ValueError(f"cited but not in {facts_file().name} nor a repository of the files read: "
                         + ", ".join(f"{i} ({', '.join(sorted(cited[i])[:3])})" for i in unknown))
    lines = [
        "# Where coverage_db comes from",
        "",
        "<!-- generated by `opaudit db build` (opaudit/matrix/provenance.py); do not edit -->",
        "",
        "Generated by `opaudit db build` from the `[[source]]` tables of every release file and from the facts "
        "in `curated/facts.toml`; a rebuild that changes this page fails the repository's tests until it is "
        "committed. Two parts:",
        "",
        "- [Facts](#facts): what the notes and caveats of the release files rely on (CPU fallback behaviour, "
        "switches, dtype facts, counting rules), each with the public place it can be checked: a file of a "
        "public repository (at a tag or commit where one was read), an issue or pull request, or a page. Where "
        "no public page states a fact, the entry says what the project observed and how. A note cites a fact "
        "as `coverage_db/SOURCES.md#<id>`.",
        "- [Files read](#files-read): every upstream file a release was read from: repository, path, commit, "
        "the sha256 of the copy read, what was read from it, and the releases that use it. To check one, fetch "
        "the file at that commit and compare its sha256; a row marked DERIVED is the project's extract of that "
        "file (its sha256 is the extract's), made as the row says.",
        "",
        '## <a id="facts"></a>Facts',
        "",
    ]
    by_vendor: dict[str, list[Fact]] = {}
    for f in facts:
        by_vendor.setdefault(f.vendor, []).append(f)
    for vendor, title in VENDORS.items():
        if vendor not in by_vendor:
            continue
        lines += [f"### {title}", ""]
        for f in by_vendor[vendor]:
            lines += [f'#### <a id="{f.id}"></a>{f.title}', "", f"`{f.id}`: {f.text}", ""]
            for o in f.origins:
                lines.append(f"- Origin: {_origin(o)}")
            if f.observed:
                lines.append(f"- Observed by the project (not stated on a public page): {f.observed}")
            users = sorted({rel.split("/", 1)[0] for rel in cited.get(f.id, ())})
            if users:
                lines.append(f"- Cited by the release files of: {', '.join(users)}")
            lines.append("")

    lines += ['## <a id="files-read"></a>Files read', ""]
    rows: dict[tuple[str, str, str | None, str, str], set[str]] = {}
    for r in releases:
        for src in r.sources:
            rows.setdefault((src.repo, src.path, src.commit, src.sha256, src.note), set()).add(r.key)
    order = {r.key: (r.vendor, r.order, r.name) for r in releases}
    for repo in sorted({k[0] for k in rows}, key=str.lower):
        where = (f"[{repo}](https://pypi.org/project/{repo.split(':', 1)[1]}/)" if repo.startswith("pypi:")
                 else f"[{repo}](https://github.com/{repo})")
        lines += [f'### <a id="{repo_anchor(repo)}"></a>{where}', "",
                  "| file | commit | sha256 | what was read | releases |", "|---|---|---|---|---|"]
        entries = sorted((k for k in rows if k[0] == repo), key=lambda k: (k[1], k[2] or "", k[3]))
        for k in entries:
            src = Source(k[0], k[1], k[2], k[3], "", k[4])
            keys = sorted(rows[k], key=lambda key: order[key])
            lines.append(f"| {_file_link(src)} | {f'`{src.commit[:12]}`' if src.commit else '-'} | `{src.sha256}` "
                         f"| {_cell(src.note) or '-'} | {_used_by(keys)} |")
        lines.append("")
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
