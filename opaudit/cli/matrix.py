"""``opaudit matrix``, ``db`` and ``doctor``: what each target release supports, the coverage database it is
read from, and the plugins installed here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opaudit.cli.console import err, out, user_errors
from opaudit.errors import InputError, OpauditError

matrix_app = typer.Typer(no_args_is_help=True, help="What each target release supports.")
db_app = typer.Typer(no_args_is_help=True, help="Build and check the coverage database (coverage_db/).")


@db_app.command("build")
def db_build(
    sources: Annotated[Path | None, typer.Option("--sources", help="The staged upstream sources (default: "
                                                 "coverage_db/upstream of this checkout).")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write (default: the package's "
                                                 "coverage_db/).")] = None,
) -> None:
    """Rebuild coverage_db/ from the vendors' staged files: deterministic, with provenance on every file."""
    from opaudit.data import data_dir
    from opaudit.matrix.build import default_sources, generate, write

    with user_errors():
        src = sources or default_sources()
        target = out_dir or data_dir("coverage_db")
        report = generate(src)
        write(report, target)
        for w in report.warnings:
            err.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
        err.print(f"{len(report.releases)} releases, {len(report.files)} files written to {target}", style="green")


@db_app.command("check")
def db_check(
    sources: Annotated[Path | None, typer.Option("--sources", help="The staged upstream sources.")] = None,
) -> None:
    """Exit 1 when coverage_db/ differs from a rebuild of its sources."""
    from opaudit.data import data_dir
    from opaudit.matrix.build import default_sources, differences, generate

    with user_errors():
        diffs = differences(generate(sources or default_sources()), data_dir("coverage_db"))
        for d in diffs:
            out.print(d, markup=False, highlight=False)
        if diffs:
            err.print(f"{len(diffs)} files differ: run opaudit db build", style="red")
            raise typer.Exit(1)
        err.print("coverage_db is in sync with its sources", style="green")


@db_app.command("cuda-dtypes")
def db_cuda_dtypes() -> None:
    """Rewrite coverage_db/curated/cuda_dtypes.toml's OpInfo pairs from the installed torch's OpInfo database
    (the ops whose CUDA kernels run dtypes the CPU's refuse; needs the expecttest package)."""
    from opaudit.matrix.cuda_dtypes import FILE, write

    with user_errors():
        try:
            version, n = write()
        except ImportError as e:
            raise InputError(f"PyTorch's OpInfo database cannot be imported: {e}",
                             hint="pip install expecttest (torch's test helpers import it)") from None
        err.print(f"{n} ops written to coverage_db/{FILE} from torch {version}'s OpInfo database", style="green")


@matrix_app.command("list")
def matrix_list(
    vendors: Annotated[list[str] | None, typer.Argument(help="Vendors to list (default: all).")] = None,
    compat: Annotated[bool, typer.Option("--compat", help="The PyTorch x vendor compatibility table "
                                         "instead.")] = False,
) -> None:
    """Vendors and releases, with the PyTorch version and op counts of each."""
    from opaudit.matrix import load_database
    from opaudit.report.matrix import render_compatibility, render_list

    with user_errors():
        db = load_database()
        for v in vendors or []:
            db.find(v)  # an unknown vendor: one clear message
        if compat:
            render_compatibility(db, out)
        else:
            render_list(db, out, [v.lower() for v in vendors] if vendors else None)


@matrix_app.command("show")
def matrix_show(
    target: Annotated[str | None, typer.Argument(help="vendor, vendor@release (package version, tag or vendor "
                                                 "release), or a matrix file (.toml).")] = None,
    matrix: Annotated[Path | None, typer.Option("--matrix", help="A user-supplied matrix file instead of a "
                                                "target.")] = None,
    ops: Annotated[list[str] | None, typer.Option("--op", help="Ops to resolve (repeatable), e.g. "
                                                  "aten::add.Tensor.")] = None,
) -> None:
    """One release: its facts, provenance, and how given ops run on it."""
    from opaudit.matrix import load_matrix
    from opaudit.report.matrix import render_release

    with user_errors():
        if (target is None) == (matrix is None):
            raise InputError("name one target, or one --matrix FILE", hint="e.g. opaudit matrix show ascend")
        render_release(load_matrix(str(matrix) if matrix is not None else str(target)), out, ops)


@matrix_app.command("diff")
def matrix_diff(
    a: Annotated[str, typer.Argument(help="A target.")],
    b: Annotated[str, typer.Argument(help="Another.")],
) -> None:
    """Ops gained and lost between two releases (or two vendors)."""
    from opaudit.matrix import load_matrix
    from opaudit.matrix.coverage import diff
    from opaudit.report.matrix import render_diff

    with user_errors():
        ma, mb = load_matrix(a), load_matrix(b)
        render_diff(diff(ma.release, mb.release), out, ma.key, mb.key)


@matrix_app.command("coverage")
def matrix_coverage(
    vendors: Annotated[list[str] | None, typer.Argument(help="Vendors (default: all).")] = None,
) -> None:
    """Each release as a share of the CUDA kernels of its PyTorch version."""
    from opaudit.matrix import load_database, load_matrix
    from opaudit.matrix.coverage import coverage
    from opaudit.report.matrix import render_coverage

    with user_errors():
        db = load_database()
        rows = []
        for v in vendors or [v for v in db.vendors if v != "cuda"]:
            db.find(v)
            for e in db.by_vendor[v.lower()]:
                c = coverage(load_matrix(e.key, db=db))
                if c is not None:
                    rows.append(c)
        render_coverage(rows, out)


@matrix_app.command("probe")
def matrix_probe(
    device: Annotated[str, typer.Option("--device", help="Device type to probe (npu, mlu, xpu, cpu, meta, "
                                        "...).")] = "cpu",
    imports: Annotated[list[str] | None, typer.Option("--import", help="Modules to import first (the "
                                                      "plugin).")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the probed matrix as a matrix file.")] = None,
    ops: Annotated[list[str] | None, typer.Option("--op", help="Ops to resolve against the probed matrix.")] = None,
) -> None:
    """Build a matrix from the live dispatcher of an installed backend."""
    from opaudit.matrix.matrix import Matrix
    from opaudit.matrix.probe import installed_torch_ops, probe
    from opaudit.report.matrix import render_release

    with user_errors():
        release = probe(device, imports=tuple(imports or ()))
        render_release(Matrix(release, installed_torch_ops()), out, ops)
        if out_file is not None:
            text = release.to_toml(f"{release.key}: probed by opaudit matrix probe")
            try:
                out_file.write_text(text, encoding="utf-8")
            except OSError as e:
                raise OpauditError(f"cannot write {out_file}: {e}") from None
            err.print(f"matrix written to {out_file}", style="green")


def doctor(
    build: Annotated[bool, typer.Option("--build", help="Build opaudit's C++ parts for this torch installation now "
                                        "(for a CI image), instead of on first use.")] = False,
) -> None:
    """The installed torch and device plugins, whether they match, the device variables set, and opaudit's C++
    parts (built for this torch installation or not, and where)."""
    from opaudit.matrix.doctor import examine
    from opaudit.native import cbuild

    with user_errors():
        if build:  # before torch is imported here: the stand-in is built in a child process either way
            _build_parts()
        r = examine()
        out.print(f"torch {r.torch}" + (f" (CUDA {r.torch_cuda})" if r.torch_cuda else " (no CUDA)"))
        if not r.plugins:
            out.print("no vendor device plugin installed")
        for p in r.plugins:
            if p.installed is None:
                out.print(f"{p.module}: not installed, but its variables are set: {p.env}")
                continue
            line = f"{p.module} {p.installed}"
            if p.built_for:
                verdict = "matches" if p.matches else "does NOT match"
                line += f": built for PyTorch {p.built_for} ({p.release}), which {verdict} torch {r.torch}"
            else:
                line += ": not a release in coverage_db (cannot tell the PyTorch it needs)"
            out.print(line, style="" if p.matches in (True, None) else "bold red", markup=False, highlight=False)
        for k, v in sorted(r.env.items()):
            out.print(f"{k}={v}", markup=False, highlight=False)
        out.print(f"C++ parts, for torch at {cbuild.install()['torch']}:", markup=False, highlight=False,
                  soft_wrap=True)
        for part in cbuild.PARTS:
            done = part.built()
            state = (f"built in {done.get('seconds', '?')} s" if done else
                     f"not built (first use builds it, about {part.seconds} s; or: opaudit doctor --build)")
            out.print(f"  {part.what}: {state}\n    {part.build_dir()}", markup=False, highlight=False,
                      soft_wrap=True)


def _build_parts() -> None:
    """opaudit doctor --build: every C++ part (a line for each first build); exit 2 naming those that failed."""
    from opaudit import standin
    from opaudit.rehearsal import native as rehearsal_device
    from opaudit.tracing import native as tracer

    def note(text: str) -> None:
        err.print(text, style="dim", markup=False, highlight=False)

    failed = []
    try:
        standin.build(note)
    except (RuntimeError, OSError) as e:
        failed.append(f"{standin.PART.what}: {e}")
    for module in (tracer, rehearsal_device):
        if module.load(note) is None:
            failed.append(str(module.reason()))
    if failed:
        raise OpauditError("\n".join(failed), hint="opaudit runs without them, on its slower Python engines")

