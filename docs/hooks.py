"""MkDocs hooks (mkdocs.yml `hooks:`): the site carries the repository files its pages link to, and refuses to
build over a stale benchmark page.

A page links a repository file as the repository shows it, relative to `docs/` (`../coverage_db/curated/
overloads.toml`), so the link works where the Markdown is read in a checkout or a forge. For the site, each such
link to an existing file is rewritten to a copy of the file under `repo/` in the site, copied as it is (never
rendered, whatever its type). A link to a path that does not exist is left alone, so `mkdocs build --strict`
fails on it as on any broken link.
"""

from __future__ import annotations

import logging
import posixpath
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SITE_PREFIX = "repo"  # where the site keeps its copies of repository files

log = logging.getLogger("mkdocs.hooks.opaudit")
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


class RepositoryFile(File):
    """A repository file copied into the site as it is: never a page, even a Markdown file."""

    def is_documentation_page(self) -> bool:
        return False

    def is_static_page(self) -> bool:
        return False


def repository_target(page_src_uri: str, target: str) -> str | None:
    """The repository path (posix, from the root) a page's relative link names, when it leaves docs/ for an
    existing file of the repository; else None."""
    if "://" in target or target.startswith(("/", "mailto:")):
        return None
    joined = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_src_uri), target))
    if joined.startswith(("../", "docs/")) or joined in ("..", "docs"):
        return None
    return joined if (ROOT / joined).is_file() else None


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    def rewrite(m: re.Match) -> str:
        path = repository_target(page.file.src_uri, m.group(2))
        if path is None:
            return m.group(0)
        dest = f"{SITE_PREFIX}/{path}"
        if files.get_file_from_path(dest) is None:
            files.append(RepositoryFile.generated(config, dest, abs_src_path=str(ROOT / path)))
        # MkDocs validates and resolves the link against this src_uri, relative to the page's own
        href = posixpath.relpath(dest, posixpath.dirname(page.file.src_uri) or ".")
        return f"{m.group(1)}{href}{m.group(3) or ''}{m.group(4)}"

    return LINK.sub(rewrite, markdown)


def on_files(files, config, **kwargs):
    sys.path.insert(0, str(DOCS))
    try:
        import gen_bench
    finally:
        sys.path.remove(str(DOCS))
    if (DOCS / "benchmarks.md").read_text(encoding="utf-8") != gen_bench.render():
        log.warning("docs/benchmarks.md is not what bench/results/ gives: run `python docs/gen_bench.py`")
    return files
