"""report/: views of a trace and of an audit: terminal, JSON, CSV, Markdown and the HTML report."""

from __future__ import annotations

from opaudit.files import check_writable, write_atomic

FORMATS = ("html", "json", "csv", "markdown")


def render(audit, fmt: str, *, lint: list[dict[str, str]] | None = None) -> str:
    """The audit as one of FORMATS, as text (the HTML page with ``lint`` findings: code, where, message)."""
    if fmt == "html":
        from opaudit.report.html import html_text

        return html_text(audit, lint=lint)
    from opaudit.report import audit as views

    if fmt == "json":
        return views.json_text(audit)
    if fmt == "csv":
        return views.csv_text(audit)
    if fmt == "markdown":
        return views.markdown_text(audit)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")


def write_reports(audit, paths: dict[str, str], *, lint: list[dict[str, str]] | None = None) -> list[str]:
    """Check every path, render every format, then write each atomically: nothing is written when one
    path cannot be, and no file is ever left half-written. ``paths``: format -> path; the written paths back."""
    for path in paths.values():
        check_writable(path)
    texts = {fmt: render(audit, fmt, lint=lint) for fmt in paths}
    return [str(write_atomic(paths[fmt], text)) for fmt, text in texts.items()]


__all__ = ["FORMATS", "check_writable", "render", "write_atomic", "write_reports"]
