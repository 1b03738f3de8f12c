"""The "Command line" synopsis of docs/cli.md (the README links it) and the CLI's own `--help` say the same thing: every
`--help` lists is in the synopsis, every option a command's `--help` shows is named there, every option the
synopsis names is in that `--help`, and where the synopsis spells out an option's values (`--mode
auto|real|meta|fake`) they are the values `--help` offers. An option renamed in one place and not the other
fails here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from helpers import ROOT
from typer.testing import CliRunner

from opaudit.cli import app

# -- what docs/cli.md says ---------------------------------------------------------------------------------


@dataclass
class Said:
    """One command's synopsis: the options it names and, for some, the values it lists."""

    options: set[str] = field(default_factory=set)
    choices: dict[str, set[str]] = field(default_factory=dict)


def _synopsis() -> dict[str, Said]:
    """command path ("scan", "matrix list"; "" for `opaudit --version`) -> what its synopsis names."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("# Command line", 1)[1]
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
    bodies: dict[str, str] = {}
    for path, body in entries:
        if not path.startswith("<"):
            for name, value in macros.items():
                body = body.replace(f"[{name}]", value)
            bodies[path] = bodies.get(path, "") + " " + body
    out: dict[str, Said] = {}
    for path, body in bodies.items():
        inherit = re.search(r"\[the options of lint(?: but ([^\]]*))?\]", body)
        body = re.sub(r"\[the options of lint[^\]]*\]", "", body)
        said = Said(_options(body), _choices(body))
        if inherit:  # fix takes lint's options, less those named after "but"
            left_out = _options(inherit.group(1) or "")
            lint = re.sub(r"\[the options of lint[^\]]*\]", "", bodies["lint"])
            said.options |= _options(lint) - left_out
            said.choices |= {k: v for k, v in _choices(lint).items() if k not in left_out}
        out[path] = said
    return out


def _options(text: str) -> set[str]:
    found: set[str] = set()
    for token in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*(?:/--?[a-zA-Z][\w-]*)*)", text):
        found.update(token.split("/"))
    return found


def _choices(text: str) -> dict[str, set[str]]:
    """`--mode auto|real|meta|fake` -> {"--mode": {"auto", "real", "meta", "fake"}}."""
    return {m.group(1): set(m.group(2).split("|"))
            for m in re.finditer(r"(?<![\w-])(--[a-z][\w-]*) ([a-z][\w]*(?:\|[a-z][\w]*)+)(?![\w|])", text)}


# -- what --help says -------------------------------------------------------------------------------------


@dataclass
class Help:
    """One `opaudit ... --help`: its subcommands, its options (each name -> all the names of its option: `-t`
    -> {`-t`, `--target`}) and the values each option offers."""

    commands: list[str] = field(default_factory=list)
    spellings: dict[str, set[str]] = field(default_factory=dict)
    choices: dict[str, set[str]] = field(default_factory=dict)

    @property
    def options(self) -> set[str]:
        return set(self.spellings)


def _help(path: str) -> Help:
    result = CliRunner().invoke(app, [*path.split(), "--help"], prog_name="opaudit")
    assert result.exit_code == 0, result.output
    return _parse_help(result.output)


def _parse_help(text: str) -> Help:
    found = Help()
    section = ""
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z]\w*:", line):
            section = line[:-1]
            continue
        if not line.startswith("  ") or line.startswith("   "):  # an entry starts two spaces in
            continue
        declared = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        if section == "Commands":
            found.commands.append(declared)
        elif section == "Options" and declared != "--help":
            names = set(re.findall(r"(?<![\w<|-])--?[a-zA-Z][\w-]*", declared))
            for name in names:
                found.spellings[name] = names
            if m := re.search(r"<([\w|]+\|[\w|]+)>", declared):
                for name in names:
                    found.choices[name] = set(m.group(1).split("|"))
    return found


def _every_help() -> dict[str, Help]:
    """command path -> its --help, for every command `opaudit --help` leads to (groups: their commands)."""
    out: dict[str, Help] = {}

    def walk(path: str) -> None:
        h = _help(path)
        if h.commands:
            for name in h.commands:
                walk(f"{path} {name}".strip())
            if path:  # a group's own --help has no options to document
                return
        out[path] = h

    walk("")
    return out


def _problems(synopsis: dict[str, Said], helps: dict[str, Help]) -> list[str]:
    problems = [f"`opaudit {path}` is in --help but not in docs/cli.md" for path in sorted(set(helps) - set(synopsis))]
    problems += [f"docs/cli.md shows `opaudit {path}`, which --help does not list"
                 for path in sorted(set(synopsis) - set(helps))]
    for path in sorted(set(helps) & set(synopsis)):
        said, shown = synopsis[path], helps[path]
        problems += [f"`opaudit {path}`: docs/cli.md names {o}, which its --help does not show"
                     for o in sorted(said.options - shown.options)]
        # every option of --help is named in at least one of its spellings (-t or --target; --x or --no-x)
        problems += [f"`opaudit {path}`: docs/cli.md's synopsis lacks {o}" for o in sorted(shown.options)
                     if not shown.spellings[o] & said.options]
        for option, values in sorted(said.choices.items()):
            if option in shown.choices and values != shown.choices[option]:
                problems.append(f"`opaudit {path} {option}`: docs/cli.md lists {'|'.join(sorted(values))}, "
                                f"--help offers {'|'.join(sorted(shown.choices[option]))}")
    return problems


# -- the tests --------------------------------------------------------------------------------------------


def test_the_synopsis_names_every_command_and_option_of_the_help_and_nothing_else():
    problems = _problems(_synopsis(), _every_help())
    assert not problems, "\n".join(problems)


def test_the_readers_read_what_they_should():
    """The test above cannot pass vacuously: each side reads the commands, options and values expected."""
    synopsis = _synopsis()
    assert {"--train", "--fail-on", "--lint", "--html"} <= synopsis["scan"].options
    assert {"--unsafe-fixes", "--force-exclude", "--select", "--ignore"} <= synopsis["fix"].options
    assert "--exit-zero" in synopsis["lint"].options and "--exit-zero" not in synopsis["fix"].options
    assert "--compat" in synopsis["matrix list"].options and "--version" in synopsis[""].options
    assert synopsis["report"].choices["--fail-on"] == {"missing", "version_skew", "unknown", "cpu_fallback",
                                                       "composite"}
    assert synopsis["fix"].choices["--output-format"] == {"text", "json", "sarif", "github"}

    helps = _every_help()
    assert {"scan", "trace", "report", "lint", "fix", "matrix show", "db build", ""} <= set(helps)
    assert "matrix" not in helps and "db" not in helps
    scan = helps["scan"]
    assert {"-t", "--target", "--fail-on", "--markdown", "--md", "-q", "--quiet"} <= scan.options
    assert scan.spellings["-t"] == {"-t", "--target"} and "--help" not in scan.options
    assert scan.choices["--mode"] == {"auto", "real", "meta", "fake"}
    assert helps["fix"].spellings["--no-force-exclude"] == {"--force-exclude", "--no-force-exclude"}
    assert "-m" in helps["run"].options and helps[""].options == {"--version"}


def test_each_kind_of_drift_is_reported():
    """The comparison above fails on each kind of drift: here on a --help edited in memory."""
    helps = _every_help()
    helps["matrix frob"] = Help()  # a command docs/cli.md does not show
    del helps["doctor"]  # a command docs/cli.md shows that --help lacks
    zoo = helps["zoo"]
    names = zoo.spellings.pop("--no-cache")
    zoo.spellings["--no-cached"] = {"--no-cached"}  # renamed in the CLI only
    assert names == {"--no-cache"}
    helps["scan"].choices["--mode"] = {"auto", "real", "meta"}  # a value gone
    problems = set(_problems(_synopsis(), helps))
    assert problems >= {
        "`opaudit matrix frob` is in --help but not in docs/cli.md",
        "docs/cli.md shows `opaudit doctor`, which --help does not list",
        "`opaudit scan --mode`: docs/cli.md lists auto|fake|meta|real, --help offers auto|meta|real",
        "`opaudit zoo`: docs/cli.md names --no-cache, which its --help does not show",
        "`opaudit zoo`: docs/cli.md's synopsis lacks --no-cached",
    }
