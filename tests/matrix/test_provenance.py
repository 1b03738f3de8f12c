"""coverage_db/SOURCES.md: every citation in what the repository ships resolves to a page the repository carries."""

from __future__ import annotations

import re

import pytest
from helpers import ROOT, run_cli

from opaudit.data import data_dir
from opaudit.matrix import load_database, provenance
from opaudit.matrix.sources import ADAPTERS

# a research note or a vendor folder's SOURCES.md: files outside the repository, which users cannot open
OUTSIDE = re.compile(r"research/|(?<![\w./-])(?!coverage_db/)[\w.-]+/SOURCES\.md")
SHIPPED = ("coverage_db", "opaudit", "docs")
TEXT = {".py", ".toml", ".tsv", ".md", ".json", ".j2", ".txt", ".yaml", ".pth"}


UPSTREAM = ROOT / "coverage_db" / "upstream"  # the raw lists: in the repository, not in the wheel


def shipped_files():
    for top in SHIPPED:
        for path in sorted((ROOT / top).rglob("*")):
            if (path.is_file() and path.suffix in TEXT and "__pycache__" not in path.parts
                    and not path.is_relative_to(UPSTREAM)):
                yield path


def test_the_raw_lists_cite_only_their_own_folders():
    """coverage_db/upstream/'s own notes (each SOURCES.md, the derived/ files) name files of that folder only:
    a relative path stays inside it, and nothing points at material beside the repository."""
    offenders = []
    for path in sorted(UPSTREAM.rglob("*")):
        if not path.is_file() or path.suffix not in TEXT or not (path.name == "SOURCES.md" or "derived" in path.parts):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            walks = [(path.parent / w).resolve() for w in re.findall(r"(?:\.\./)+[\w.-]*", line)]
            if "research/" in line or any(not w.is_relative_to(UPSTREAM) for w in walks):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert offenders == [], "\n".join(offenders[:20])


@pytest.fixture(scope="module")
def page() -> str:
    return provenance.page_path().read_text(encoding="utf-8")


def anchors(text: str) -> set[str]:
    return set(re.findall(r'<a id="([a-z0-9-]+)"></a>', text))


def test_nothing_shipped_cites_a_file_outside_the_repository():
    offenders = []
    for path in shipped_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert offenders == [], "\n".join(offenders[:20])
    # the pattern itself catches what the files used to say, and lets the page's own citations through
    assert OUTSIDE.search("Sources: biren/SOURCES.md (Reliability), research/vendors-dipu-biren-others.md 4.3")
    assert OUTSIDE.search("caveat source enflame/SOURCES.md (Facts)")
    assert not OUTSIDE.search("Source: coverage_db/SOURCES.md#xla-cpu-fallback")


def test_every_cited_anchor_is_on_the_page(page):
    on_page = anchors(page)
    cited: dict[str, list[str]] = {}
    for path in [*shipped_files(), ROOT / "README.md", ROOT / "DEVELOPERS.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in provenance.CITED.finditer(path.read_text(encoding="utf-8")):
            cited.setdefault(m.group(1), []).append(path.relative_to(ROOT).as_posix())
    missing = {a: files[:3] for a, files in cited.items() if a not in on_page}
    assert missing == {}
    assert len(set(cited) & {f.id for f in provenance.load_facts()}) >= 25  # the notes do cite the facts


def test_every_adapter_release_cites_its_cpu_fallback_fact():
    db = load_database()
    for e in db.entries:
        r = db.release(e)
        if r.vendor in ADAPTERS:  # the releases built from a vendor's plugin (cuda, cpu, mps have no such note)
            assert provenance.CITED.search(r.fallback.note), (e.key, r.fallback.note)


def test_caveat_sources_name_public_files_not_the_staged_copies(page):
    db = load_database()
    releases = [db.release(e) for e in db.entries]
    staged = {src.staged for r in releases for src in r.sources}
    sources = {c.source for r in releases for c in r.all_caveats()}
    assert not sources & staged
    # those that named a staged copy now name its repository, path and commit, and the page's section of it
    biren = next(r for r in releases if r.key == "biren@1.0.0.21200+br2xx")
    limits = {c.source for c in biren.caveats if c.api}
    assert limits == {"BIRENSUPA/torch-supa docs/user_guide/source/chapter05_torch_supa_api_limitations.rst "
                      "@ f79c0e7f0793 (coverage_db/SOURCES.md#files-birensupa-torch-supa)"}
    assert '<a id="files-birensupa-torch-supa"></a>' in page


def test_the_page_lists_every_source_of_every_release_with_the_releases_using_it(page):
    rows = [line for line in page.splitlines() if line.startswith("| ") and "`" in line]
    by_sha: dict[str, list[str]] = {}
    for row in rows:
        sha = re.search(r"`([0-9a-f]{64})`", row)
        assert sha, row
        by_sha.setdefault(sha.group(1), []).append(row)
    db = load_database()
    for e in db.entries:
        r = db.release(e)
        for src in r.sources:
            hits = [row for row in by_sha.get(src.sha256, []) if f"`{src.path}`" in row]
            assert hits, (e.key, src.path)
            vendor, name = r.key.split("@", 1)
            assert any(re.search(rf"{re.escape(vendor)}@[^;|]*(?<![\w.+-]){re.escape(name)}(?![\w.+-])", row)
                       for row in hits), (e.key, src.path)


def test_the_page_names_public_places_only(page):
    for word in ("shared/", "research", "/work/", "../"):
        assert word not in page, word
    db = load_database()
    staged = {src.staged for e in db.entries for src in db.release(e).sources}
    assert not [s for s in staged if s in page]  # where the copies lie here is no public place
    urls = re.findall(r"\]\((https?://[^)\s]+)\)|<(https?://[^>\s]+)>", page)
    assert urls
    for url in (a or b for a, b in urls):
        assert url.startswith(("https://github.com/", "https://pypi.org/project/")), url
    assert "generated by `opaudit db build`" in page.splitlines()[2]
    # every fact says where it can be checked or what was observed instead, and the page shows which
    for fact in provenance.load_facts():
        section = page.split(f'<a id="{fact.id}"></a>', 1)[1].split("#### ", 1)[0]
        assert ("- Origin: " in section) == bool(fact.origins), fact.id
        assert ("- Observed by the project" in section) == bool(fact.observed), fact.id


def test_a_citation_of_an_unknown_fact_fails_the_build(tmp_path):
    with pytest.raises(ValueError, match=r"no-such-fact \(xla/2\.8\.0\.toml\)"):
        provenance.page({"xla/2.8.0.toml": "note = 'see coverage_db/SOURCES.md#no-such-fact'"}, [])
    bad = tmp_path / "facts.toml"
    bad.write_text('[[fact]]\nid = "a-fact"\nvendor = "xla"\ntitle = "t"\ntext = "x"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="needs a public origin or what the project observed"):
        provenance.load_facts(bad)
    bad.write_text('[[fact]]\nid = "a-fact"\nvendor = "xla"\ntitle = "t"\ntext = "x"\norigins = [{path = "a.cpp"}]\n',
                   encoding="utf-8")
    with pytest.raises(ValueError, match="an origin is"):
        provenance.load_facts(bad)


def test_matrix_show_names_the_page():
    code, out, err = run_cli("matrix", "show", "xla")
    assert code == 0, err
    assert "coverage_db/SOURCES.md#xla-cpu-fallback" in out
    line = next(line for line in out.splitlines() if line.strip().startswith("provenance:"))
    assert str(data_dir("coverage_db") / "SOURCES.md") in line
