"""report/: views of a trace (and later of an audit): terminal now; JSON, CSV, Markdown, HTML later."""
