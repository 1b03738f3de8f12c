"""One target release: what its plugin registers, and the facts around it (one file in coverage_db/).

The same format serves for user-supplied matrices (docs/matrix-format.md), so a customer's list for a
chip with no public data goes anywhere a vendor release goes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from opaudit import tomlcache
from opaudit.data import tomllib
from opaudit.errors import InputError

# op categories a release file may hold (ops: aten `name.overload`, or `ns::name.overload` elsewhere)
CATEGORIES = {
    "native": "aten ops with a kernel of the plugin on its dispatch key",
    "autograd": "aten ops whose autograd the plugin overrides (its own backward)",
    "cpu": "aten ops the plugin registers as a round trip through the CPU kernel",
    "forced_cpu": "aten ops the plugin always sends to its CPU fallback",
    "unsupported": "aten ops registered with a kernel that raises",
    "sparse": "aten ops with a kernel for sparse tensors of the device",
    "quant": "aten ops with a kernel for quantized tensors of the device",
    "custom": "operators of the plugin's own namespaces (npu::..., torch_mlu::...)",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_OP_TEXT = r"(?:[A-Za-z_][A-Za-z0-9_]*::)?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?"
_OP = re.compile(f"^{_OP_TEXT}$")
_OPS = re.compile(f"(?:{_OP_TEXT}\n)*{_OP_TEXT}|")


@dataclass
class CpuFallback:
    """The plugin's own generic CPU fallback for ops it lacks."""

    exists: bool
    default_on: bool = False
    switch: str | None = None  # how a user turns it on or off, e.g. "ENABLE_FALLBACK_TO_CPU=0 disables it"
    note: str = ""


# what a [[caveat]] says about the op for its dtypes; the first two change the op's status for calls with them
CAVEAT_KINDS = {
    "unsupported": "the device cannot hold or compute these dtypes: calls with them fail (status missing)",
    "cpu": "the plugin sends calls with these dtypes to its CPU fallback (status cpu_fallback)",
    "converted": "the plugin casts these dtypes before computing: it runs, with less range or precision",
    "limit": "a documented limitation for these dtypes (read the note)",
    "test_skip": "the vendor's own tests skip these dtypes: a hint, not a documented limit",
}


@dataclass
class Caveat:
    """What the data says about an op (or a Python API) for some dtypes; ``kind`` is a key of CAVEAT_KINDS."""

    op: str  # aten name.overload, or a Python API name when `api` is true
    dtypes: list[str]
    note: str
    source: str
    api: bool = False
    kind: str = "limit"

    def describe(self) -> str:
        """One line for a report: what kind of fact it is, the dtypes, the note and where it comes from."""
        dtypes = ", ".join(self.dtypes)
        where = f" ({self.source})" if self.source else ""
        if self.kind == "test_skip":
            return f"the vendor's tests skip {dtypes}: {self.note}{where}"
        label = {"unsupported": "unsupported", "cpu": "on the CPU", "converted": "converted"}.get(self.kind)
        return f"{dtypes}{f' {label}' if label else ''}: {self.note}{where}"


@dataclass
class Source:
    """Where a file of the release came from."""

    repo: str
    path: str
    commit: str | None
    sha256: str
    staged: str = ""  # its path under the sources folder
    note: str = ""


@dataclass
class Release:
    vendor: str  # "ascend"
    name: str  # the plugin's package version ("2.6.0.post5"), or its tag / branch where no package exists
    torch: str  # the PyTorch version it builds against ("2.6.0")
    device_type: str  # "npu"
    dispatch_key: str  # "PrivateUse1"
    package: str = ""  # "torch_npu"
    import_name: str | None = None  # the import that registers the device ("torch_npu"); None: core
    aliases: list[str] = field(default_factory=list)  # other names: release tags, the vendor's release
    vendor_release: str | None = None  # the vendor's own release ("7.3.0", CANN's)
    order: int = 0  # chronological rank within the vendor: higher is newer
    prerelease: bool = False  # a development snapshot or pre-release: never what the vendor alone means
    exact: bool = True  # False: the list is an upper bound or an approximation (see `accuracy`)
    accuracy: str = ""  # what "exact" rests on, or why it is only a bound
    fallback: CpuFallback = field(default_factory=lambda: CpuFallback(False))
    # the backend runs in-place and out= ops as their functional form (functionalization, as PyTorch/XLA):
    # a listed functional op covers its variants
    functionalization: bool = False
    ops: dict[str, list[str]] = field(default_factory=dict)
    caveats: list[Caveat] = field(default_factory=list)
    caveats_file: str | None = None  # a file of further [[caveat]] tables, relative to this one (shared lists)
    _shared: Path | None = field(default=None, repr=False, compare=False)  # where caveats_file was found
    sources: list[Source] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.vendor}@{self.name}"

    def all_caveats(self) -> list[Caveat]:
        """The release's own caveats and those of its caveats_file (parsed on first use, once per file)."""
        if self._shared is None:
            return self.caveats
        return self.caveats + list(_shared_caveats(self._shared))

    def op_set(self, category: str) -> frozenset[str]:
        return frozenset(self.ops.get(category, ()))

    # -- the file format --------------------------------------------------------------------------
    def to_toml(self, header: str = "", *, caveats_file: str | None = None) -> str:
        """The release file; with ``caveats_file``, the caveats are left to that file (caveats_to_toml)."""
        lines = [f"# {line}" if line else "#" for line in header.splitlines()]
        if lines:
            lines.append("")
        lines += ["[release]"]
        for k in ("vendor", "name", "torch", "device_type", "dispatch_key", "package", "import_name",
                  "vendor_release", "order", "prerelease", "exact", "accuracy", "functionalization"):
            v = getattr(self, k)
            if v is not None and v != "" and not (k in ("functionalization", "prerelease") and not v):
                lines.append(f"{k} = {_toml(v)}")
        if self.aliases:
            lines.append(f"aliases = {_toml(self.aliases)}")
        if caveats_file:
            lines.append(f"caveats_file = {_toml(caveats_file)}")
        if self.notes:
            lines.append("notes = [")
            lines += [f"  {_toml(n)}," for n in self.notes]
            lines.append("]")
        fb = self.fallback
        lines += ["", "[cpu_fallback]", f"exists = {_toml(fb.exists)}", f"default_on = {_toml(fb.default_on)}"]
        if fb.switch:
            lines.append(f"switch = {_toml(fb.switch)}")
        if fb.note:
            lines.append(f"note = {_toml(fb.note)}")
        for s in self.sources:
            lines += ["", "[[source]]"]
            for k in ("repo", "path", "commit", "sha256", "staged", "note"):
                v = getattr(s, k)
                if v:
                    lines.append(f"{k} = {_toml(v)}")
        if not caveats_file:
            lines += _caveat_lines(self.caveats)
        lines += ["", "[ops]  # one op per line (a list of strings is accepted too)"]
        for cat in sorted(self.ops):
            names = sorted(set(self.ops[cat]))
            lines.append(f"# {cat}: {len(names)}")
            lines.append(f"{cat} = '''")
            lines += names
            lines.append("'''")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_toml(cls, text: str, *, origin: str = "matrix file", base: Path | None = None,
                  validate: bool = True) -> Release:
        """Parse a release file; ``base`` is the folder its ``caveats_file`` is relative to. ``validate``
        checks it against release.schema.json (coverage_db's generated files skip that: a test checks them)."""
        try:
            data = tomlcache.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise InputError(f"{origin} is not valid TOML: {e}") from None
        try:
            release = cls.from_dict(data, origin=origin, validate=validate)
        except _AtToken as e:  # say where the offending text is
            line = next((i for i, text_line in enumerate(text.splitlines(), 1) if e.token in text_line), None)
            where = f" (line {line})" if line else ""
            raise InputError(e.message.replace(f"{origin}:", f"{origin}{where}:", 1), hint=e.hint) from None
        if release.caveats_file:
            if base is None:
                raise InputError(f"{origin}: caveats_file {release.caveats_file!r} cannot be found from a text",
                                 hint="load the release from its file")
            release._shared = base / release.caveats_file
            if not release._shared.is_file():
                raise InputError(f"{origin}: its caveats_file {release._shared} does not exist")
        return release

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, origin: str = "matrix file", validate: bool = True) -> Release:
        rel = data.get("release")
        if not isinstance(rel, dict):
            raise InputError(f"{origin}: no [release] table", hint=_FORMAT_HINT)
        missing = [k for k in ("vendor", "name", "torch", "device_type", "dispatch_key") if k not in rel]
        if missing:
            raise InputError(f"{origin}: [release] lacks {', '.join(missing)}", hint=_FORMAT_HINT)
        if validate:
            _validate(data, origin)
        ops = data.get("ops", {})
        if not isinstance(ops, dict) or not all(isinstance(v, (list, str)) for v in ops.values()):
            raise InputError(f"{origin}: [ops] must map categories to lists of op names", hint=_FORMAT_HINT)
        ops = {cat: v.split() if isinstance(v, str) else v for cat, v in ops.items()}
        unknown = sorted(set(ops) - set(CATEGORIES))
        if unknown:
            raise _AtToken(unknown[0], f"{origin}: unknown op categories {', '.join(unknown)} in [ops]",
                           hint=f"categories: {', '.join(CATEGORIES)}")
        for cat, names in ops.items():
            if all(isinstance(n, str) for n in names) and _OPS.fullmatch("\n".join(names)):
                continue  # all well-formed (one regex pass; the loop below finds the culprit otherwise)
            for n in names:
                if not isinstance(n, str) or not _OP.match(n):
                    raise _AtToken(str(n), f"{origin}: [ops] {cat}: {n!r} is not an op name",
                                   hint="write aten ops as name or name.overload, e.g. add.Tensor")
        fb = data.get("cpu_fallback", {})
        try:
            return cls(
                vendor=str(rel["vendor"]), name=str(rel["name"]), torch=str(rel["torch"]),
                device_type=str(rel["device_type"]), dispatch_key=str(rel["dispatch_key"]),
                package=str(rel.get("package", "")), import_name=rel.get("import_name"),
                aliases=[str(a) for a in rel.get("aliases", [])], vendor_release=rel.get("vendor_release"),
                order=int(rel.get("order", 0)), prerelease=bool(rel.get("prerelease", False)),
                exact=bool(rel.get("exact", True)),
                accuracy=str(rel.get("accuracy", "")), notes=[str(n) for n in rel.get("notes", [])],
                functionalization=bool(rel.get("functionalization", False)),
                fallback=CpuFallback(bool(fb.get("exists", False)), bool(fb.get("default_on", False)),
                                     fb.get("switch"), str(fb.get("note", ""))),
                ops={cat: sorted({_strip_aten(n) for n in names} if any(n.startswith("aten::") for n in names)
                                 else set(names)) for cat, names in ops.items()},
                caveats=_caveats(data, origin), caveats_file=rel.get("caveats_file"),
                sources=[Source(str(s["repo"]), str(s["path"]), s.get("commit"), str(s.get("sha256", "")),
                                str(s.get("staged", "")), str(s.get("note", ""))) for s in data.get("source", [])],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{origin}: {type(e).__name__}: {e}", hint=_FORMAT_HINT) from None

    @classmethod
    def load(cls, path: str | Path, *, validate: bool = True) -> Release:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"matrix file not found: {p}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read matrix file {p}: {e}") from None
        return cls.from_toml(text, origin=str(p), base=p.parent, validate=validate)


def caveats_to_toml(caveats: list[Caveat], header: str = "") -> str:
    """A file of ``[[caveat]]`` tables that several release files share through ``caveats_file``."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    body = _caveat_lines(caveats)
    return "\n".join(lines + body[1:] if not lines else lines + body) + "\n"


@cache
def _shared_caveats(path: Path) -> tuple[Caveat, ...]:
    """A shared caveat file, parsed once however many releases name it."""
    try:
        data = tomlcache.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the caveats file {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path} is not valid TOML: {e}") from None
    return tuple(_caveats(data, str(path)))


def _caveat_lines(caveats: list[Caveat]) -> list[str]:
    lines: list[str] = []
    for c in caveats:
        lines += ["", "[[caveat]]", f"op = {_toml(c.op)}", f"dtypes = {_toml(c.dtypes)}",
                  f"note = {_toml(c.note)}", f"source = {_toml(c.source)}", f"kind = {_toml(c.kind)}"]
        if c.api:
            lines.append("api = true")
    return lines


def _caveats(data: dict[str, Any], origin: str) -> list[Caveat]:
    try:
        out = [Caveat(str(c["op"]), [str(d) for d in c.get("dtypes", [])], str(c.get("note", "")),
                      str(c.get("source", "")), bool(c.get("api", False)), str(c.get("kind", "limit")))
               for c in data.get("caveat", [])]
    except (KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{origin}: a [[caveat]] table is malformed ({type(e).__name__}: {e})",
                         hint="each [[caveat]] needs op and may have dtypes, note, source, api, kind") from None
    for c in out:
        if c.kind not in CAVEAT_KINDS:
            raise _AtToken(c.kind, f"{origin}: [[caveat]] of {c.op}: unknown kind {c.kind!r}",
                           hint=f"kinds: {', '.join(CAVEAT_KINDS)}")
    return out


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads((Path(__file__).parent / "release.schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _validate(data: dict[str, Any], origin: str) -> None:
    """Refuse what the format does not have (a misspelt key would otherwise be read as absent), naming the
    table, the key and, through _AtToken, its line."""
    errors = list(_validator().iter_errors(data))
    if not errors:
        return
    e = min(errors, key=lambda x: (len(x.absolute_path), [str(p) for p in x.absolute_path]))
    path = list(e.absolute_path)
    table = "the file" if not path else f"[{path[0]}]" if len(path) == 1 or not isinstance(path[1], int) \
        else f"[[{path[0]}]] number {path[1] + 1}"
    if e.validator == "additionalProperties":
        extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
        known = ", ".join(e.schema.get("properties", {}))
        raise _AtToken(extra[0], f"{origin}: {table} has an unknown key {extra[0]!r}", hint=f"its keys: {known}")
    key = next((str(p) for p in reversed(path) if isinstance(p, str)), "")
    raise _AtToken(key or str(e.instance), f"{origin}: {table}" + (f" {key}" if key else "") + f": {e.message}",
                   hint=_FORMAT_HINT)


class _AtToken(InputError):
    """A bad value whose line from_toml can point at: the first line holding ``token``."""

    def __init__(self, token: str, message: str, *, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.token = token


_FORMAT_HINT = "see docs/matrix-format.md for the format of a matrix file"


def _strip_aten(name: str) -> str:
    return name[len("aten::"):] if name.startswith("aten::") else name


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        if "'" not in v and not _CONTROL.search(v):
            return f"'{v}'"  # a literal string: tomllib reads these far faster than basic strings
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")
