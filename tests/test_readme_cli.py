"""The README's "Command line" synopsis and the CLI say the same thing: every command the CLI has is
there, with every option it takes, and nothing the CLI does not have (an option renamed in one place
and not the other fails here)."""

from __future__ import annotations

import re
from typing import Any

import typer.main
from helpers import ROOT

from opaudit.cli import app


def _synopsis() -> dict[str, set[str]]:
    """command path ("scan", "matrix list") -> the options its synopsis names."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Command line", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    entries: list[tuple[str, str]] = []  # (command path, its text)
    macros: dict[str, str] = {}
    for line in block.splitlines():
        line = line.split("  # ", 1)[0].rstrip()
        stripped = line.strip()
        if m := re.match(r"([A-Z][A-Z ]+[A-Z]):\s*(.*)", stripped):
            name = m.group(1)
            macros[name] = m.group(2)
            entries.append((f"<{name}>", ""))
            continue
        if stripped.startswith("opaudit "):
            for part in re.split(r"\s+\|\s+(?=opaudit )", stripped):
                words = part.split()[1:]
                path = []
                for w in words:
                    if not re.fullmatch(r"[a-z][a-z-]*", w):
                        break
                    path.append(w)
                entries.append((" ".join(path), part))
        elif entries:  # a continuation line
            path, body = entries[-1]
            if path.startswith("<"):
                macros[path[1:-1]] += " " + stripped
            else:
                entries[-1] = (path, body + " " + stripped)
    out: dict[str, set[str]] = {}
    for path, body in entries:
        if path.startswith("<"):
            continue
        for name, value in macros.items():
            body = body.replace(f"[{name}]", value)
        body = re.sub(r"\[the options of lint[^\]]*\]", "", body)
        out.setdefault(path, set()).update(_options(body))
    lint = out.get("lint", set())
    for path, body in entries:
        if m := re.search(r"\[the options of lint(?: but ([^\]]*))?\]", body):
            out[path] |= lint - _options(m.group(1) or "")
    return out


def _options(text: str) -> set[str]:
    found: set[str] = set()
    for token in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*(?:/--?[a-zA-Z][\w-]*)*)", text):
        found.update(token.split("/"))
    return found


def _commands() -> dict[str, Any]:
    root = typer.main.get_command(app)
    out: dict[str, Any] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):  # a group (typer's own click)
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            out[" ".join(path)] = cmd

    walk(root, [])
    return out


def test_every_command_is_in_the_synopsis_with_exactly_its_options():
    synopsis = _synopsis()
    commands = _commands()
    assert set(commands) <= set(synopsis), f"commands missing from the README: {set(commands) - set(synopsis)}"
    assert set(synopsis) - {""} <= set(commands), f"README commands the CLI lacks: {set(synopsis) - set(commands)}"
    problems = []
    for path, cmd in commands.items():
        names: set[str] = set()
        for p in cmd.params:
            if p.param_type_name == "option":
                names.update(p.opts)
                names.update(p.secondary_opts)
        names.discard("--help")
        said = synopsis[path]
        problems += [f"`opaudit {path}`: the README names {o}, which it does not have" for o in sorted(said - names)]
        # each option is named in at least one of its spellings (--respect-gitignore/--no-respect-gitignore)
        for p in cmd.params:
            if p.param_type_name == "option" and "--help" not in p.opts:
                if not (set(p.opts) | set(p.secondary_opts)) & said:
                    problems.append(f"`opaudit {path}`: the README's synopsis lacks {'/'.join(p.opts)}")
    assert not problems, "\n".join(problems)

def test_the_synopsis_parser_reads_what_it_should():
    """The test above cannot pass vacuously: the synopsis it reads has the commands and options expected."""
    synopsis = _synopsis()
    assert {"--train", "--fail-on", "--lint", "--html"} <= synopsis["scan"]
    assert {"--unsafe-fixes", "--force-exclude", "--select", "--ignore"} <= synopsis["fix"]
    assert "--compat" in synopsis["matrix list"] and "--version" in synopsis[""]
