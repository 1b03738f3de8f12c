"""``opaudit fix --target T --verify [PATHS] -- SCRIPT ARGS``: a port proven to run on the target.

    v = verify("train.py", ["--epochs", "1"], Settings(target="ascend", unsafe_fixes=True))
    v.ok, v.problems(), v.lines()

Three things happen, the two runs each in a process of its own (``verify_run``):

1. the original is run on the CPU, as ``python SCRIPT ARGS`` would run it on a machine without CUDA, in a
   temporary copy of its tree (taken before anything is rewritten; what it writes is thrown away), started in
   that copy with no folder of the original tree on its sys.path (verify_run.isolate), so that it imports the
   original only, never the port written in place meanwhile: the reference, its losses and whether it trains;
2. PATHS are fixed for T (in place; with ``in_place=False``, as ``--diff`` asks, in a temporary copy, and
   nothing is written), and the port is linted again: what CUDA use is left, with file, line and code;
3. the port is rehearsed on T's simulated device with CUDA absent (``torch.cuda.is_available()`` False,
   nothing mapped from ``cuda``), as on a machine with the vendor's plugin and no CUDA.

The port passes (``ok``) when it ran to its end, reached the target's device, left no CUDA use on the path
that ran (a finding of lint on a line that ran; info findings and advice about the target do not count:
``is_cuda_use``), and, where the original trains, stepped parameters on the device and moved them. Findings on
lines the run never reached are listed, and do not fail it. The ops that would fall back or are missing come from
the rehearsal's statistics; the losses are compared with the reference's, both runs seeded alike.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from opaudit.errors import InputError
from opaudit.lint.engine import DEFAULT_EXCLUDE, VCS_DIRS, Run, Settings, run
from opaudit.lint.findings import Finding

LINK_OVER = 8 << 20  # files over 8 MiB (data, checkpoints) are linked into a copy, not copied
RTOL = 1e-3  # losses that agree within this relative difference are equal (a device's own path for a GRU cell
# or an attention differs from the CPU's in the last digits)
# findings that name no CUDA API, device string or library, whose effect the rehearsal itself shows: `fused=True`
# passed on to an optimizer (the fused kernel runs on the device, or the op statistics say it falls back), and
# channels_last under Ascend's auto-migration (OA613, advice about that target). Every other finding left is CUDA
# use, a rule scoped to some targets too (PyTorch Lightning's accelerator, OA716, where Lightning has no device)
ADVICE = frozenset({"OA207", "OA613"})


def is_cuda_use(code: str) -> bool:
    """Whether a finding of ``code`` left in a port is CUDA use (what fails ``fix --verify``), not advice."""
    return code not in ADVICE


@dataclass
class Verification:
    """What ``verify`` found (module doc)."""

    target: str
    script: str
    argv: list[str]
    fixed: Run  # the fix of PATHS (its files' findings, rewrites and diffs)
    reference: dict[str, Any]  # the original's CPU run (verify_run's result)
    port: dict[str, Any]  # the port's rehearsal
    cuda_left: list[Finding] = field(default_factory=list)  # on lines that ran
    not_reached: list[Finding] = field(default_factory=list)  # CUDA use on lines the run never reached
    # CUDA use in an import the run reached and that raised (the module is not installed; the program went on without
    # it, as a try/except ImportError fallback does): (the finding, the module)
    not_imported: list[tuple[Finding, str]] = field(default_factory=list)
    device: str = ""
    in_place: bool = True  # False (--diff): the findings' lines are the lines of the port, in a copy
    reference_argv: list[str] | None = None  # the arguments of the CPU run, where they differ (on_cpu)
    port_argv: list[str] | None = None  # the arguments of the port's run, where they differ (on_target)

    # -- verdicts -----------------------------------------------------------------------------------------
    @property
    def ran(self) -> bool:
        return bool(self.port.get("ok"))

    @property
    def device_calls(self) -> int:
        stats = self.port.get("stats") or {}
        return int(sum((stats.get("calls") or {}).values()))

    @property
    def reached(self) -> bool:
        return self.device_calls > 0

    @property
    def reference_trains(self) -> bool:
        return bool(self.reference.get("ok") and self.reference.get("moved"))

    @property
    def trained_on_device(self) -> bool:
        return bool(self.port.get("moved")) and self.device in self.port.get("param_devices", [])

    @property
    def ok(self) -> bool:
        return self.ran and self.reached and not self.cuda_left and \
            (not self.reference_trains or self.trained_on_device)

    def ops(self, *, missing: bool) -> list[dict[str, Any]]:
        """The ops that fell back (the vendor's CPU fallback, opaudit's fallback), or those the target lacks."""
        rows = (self.port.get("stats") or {}).get("ops", [])
        if missing:
            return [r for r in rows if r.get("status") == "missing"]
        return [r for r in rows if r.get("path") != "native" and r.get("status") != "missing"]

    def losses(self) -> str | None:
        """The losses against the original's CPU run, in words (None: nothing to compare)."""
        ref, port = self.reference.get("losses") or [], self.port.get("losses") or []
        if not ref or not port:
            return None
        n = min(len(ref), len(port))
        for i in range(n):
            a, b = ref[i], port[i]
            if not (abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-12) or a == b):
                return (f"losses differ from the CPU run's from step {i + 1} on ({b:.6g} on {self.device}, {a:.6g} "
                        "on the CPU; another precision or path on the device, or randomness the seed does not fix)")
        more = f"; the port recorded {len(port)}, the CPU run {len(ref)}" if len(ref) != len(port) else ""
        return f"losses equal to the CPU run's for {n} step{'s' if n != 1 else ''} (rtol {RTOL:g}){more}"

    def problems(self) -> list[str]:
        """What keeps the port from passing, one line each (empty: it passes)."""
        out = []
        if not self.ran:
            out.append(f"the port did not run to its end on {self.target}: {self.port.get('error')}")
        out += self._run_problems()
        for f in self.cuda_left:
            out.append(f"CUDA use left on the path that ran: {f.path}:{f.line}:{f.col}: {f.code} {f.message}")
        return out

    def _run_problems(self) -> list[str]:
        """The problems of a port that ran: it never reached the device, or did not train where the original does
        (what the report's other lines do not say; a failure and the CUDA left are shown as they are)."""
        out = []
        if self.ran and not self.reached:
            out.append(f"no op reached the {self.device} device: the port ran on the CPU only")
        if self.reference_trains and self.ran and not self.trained_on_device:
            skipped = int(self.port.get("skipped") or 0)
            if skipped and not self.port.get("steps"):
                # mixed precision: the scaler skips a step whose float16 gradients overflow, as on a CUDA GPU in
                # the first steps; the run is too short to show the port training
                out.append(f"the original trains; the port's GradScaler skipped every optimizer step ({skipped}: inf "
                           f"or NaN gradients, the last at scale {self.port.get('scale'):g}), so this run does not "
                           "show it training on the device: verify it over more steps")
            else:
                where = ", ".join(self.port.get("param_devices", [])) or "no optimizer step"
                out.append(f"the original trains, the port did not train on {self.device} (parameters stepped on: "
                           f"{where})")
        return out

    def lines(self) -> list[str]:
        """The report, for a terminal."""
        ref = self.reference
        out = [f"verify {self.script} on {self.target} (device {self.device}, CUDA absent):"]
        if self.ran:
            out.append(f"  ran to its end; {self.device_calls:,} op calls on {self.device}" if self.reached else
                       "  ran to its end, on the CPU only: no op reached the device")
        else:
            out.append(f"  failed: {self.port.get('error')}")
            if self.port.get("details"):
                out += ["    " + x for x in str(self.port["details"]).splitlines()]
        if self.port_argv is not None:
            out.append(f"  the port runs on {self.device} with: " + " ".join(self.port_argv))
        if self.reference_argv is not None:
            out.append("  the original runs on the CPU with: " + " ".join(self.reference_argv))
        if ref.get("ok"):
            trains = "trains" if ref.get("moved") else ("steps an optimizer without moving a parameter"
                                                        if ref.get("steps") else "does not train")
            out.append(f"  the original on the CPU: ran, {trains} ({ref.get('steps', 0)} optimizer steps)")
        elif ref.get("losses"):  # it stopped later: what it recorded up to there is the reference
            out.append(f"  the original on the CPU: stopped after {ref.get('steps', 0)} optimizer steps "
                       f"({ref.get('error')}); its losses up to there are the reference")
        else:
            out.append(f"  the original on the CPU: did not run ({ref.get('error')}); no reference")
        steps = self.port.get("steps", 0)
        if steps:
            devices = ", ".join(self.port.get("param_devices", []))
            moved = "moved" if self.port.get("moved") else "did not move"
            out.append(f"  the port: {steps} optimizer steps, parameters on {devices}, {moved}")
        elif self.ran:
            skipped = self.port.get("skipped")
            out.append(f"  the port: no optimizer step (its GradScaler skipped {skipped})" if skipped else
                       "  the port: no optimizer step")
        words = self.losses()
        if words:
            out.append(f"  {words}")
        fallen, missing = self.ops(missing=False), self.ops(missing=True)
        if missing:
            out.append(f"  ops {self.target} lacks (opaudit's fallback ran them): "
                       + ", ".join(f"{r['op']} ({r['calls']} calls{', ' + r['source'] if r.get('source') else ''})"
                                   for r in missing[:12]) + (" ..." if len(missing) > 12 else ""))
        if fallen:
            shown = ", ".join(f"{r['op']} ({r['path']}, {r['calls']} calls)" for r in fallen[:12])
            out.append("  ops that fall back: " + shown + (" ..." if len(fallen) > 12 else ""))
        of = "" if self.in_place else " (a line of the port)"
        for f in self.cuda_left:
            out.append(f"  CUDA left, ran: {f.path}:{f.line}:{f.col}: {f.code} {f.message}{of}")
        for f in self.not_reached:
            out.append(f"  CUDA left, not reached by this run: {f.path}:{f.line}:{f.col}: {f.code} {f.message}{of}")
        for f, module in self.not_imported:
            out.append(f"  CUDA left, not used by this run: {f.path}:{f.line}:{f.col}: {f.code} {f.message}{of} (the "
                       f"import raised: {module} is not installed here, and the program went on without it)")
        out.extend(f"  {p}" for p in self._run_problems())
        problems = self.problems()
        out.append(f"verify: the port runs on {self.target} with no CUDA left" if not problems else
                   f"verify: {len(problems)} problem{'s' if len(problems) != 1 else ''} left")
        return out


def verify(script: str, argv: list[str] | None, settings: Settings, *, paths: list[str] | None = None,
           in_place: bool = True, rewrite: bool = True, timeout: float | None = None,
           jobs: int | None = None) -> Verification:
    """Fix ``paths`` (default: the script's folder) for ``settings.target`` and rehearse ``script argv`` as
    ported (module doc). ``in_place=False`` fixes a temporary copy and writes nothing; ``rewrite=False`` checks
    a tree as it is (one already ported)."""
    from opaudit.lint.catalogue import load_target
    from opaudit.matrix.vendors import canonical

    target = load_target(settings.target)
    if target.neutral or target.keeps_cuda or not target.device:
        raise InputError(f"--verify rehearses a vendor's device; {settings.target} has none",
                         hint="--target ascend, cambricon, biren, musa, xpu or mps")
    vendor = canonical(settings.target)
    script_path = Path(script)
    if not script_path.is_file():
        raise InputError(f"script not found: {script}")
    paths = list(paths or [str(script_path.parent or Path("."))])
    for p in paths:
        if not Path(p).exists():
            raise InputError(f"{p}: no such file or directory")
    root = Path(os.path.commonpath([str(Path(p).resolve() if Path(p).is_dir() else Path(p).resolve().parent)
                                    for p in [*paths, str(script_path)]]))
    cwd = Path.cwd().resolve()
    with tempfile.TemporaryDirectory(prefix="opaudit-verify-", ignore_cleanup_errors=True) as tmp:
        tmpdir = Path(tmp)
        original = tmpdir / "original" / root.name
        _copy_tree(root, original)
        args = list(argv or [])
        cpu_argv = on_cpu(args, target)
        reference = _start(tmpdir, "reference", _moved(script_path, root, original), cpu_argv,
                           _moved(cwd, root, original), original, None, root)
        try:
            if in_place:
                port_root, port_paths = root, paths
                fixed = run(paths, settings, fix=rewrite, write=True, jobs=jobs) if rewrite else Run()
            else:
                port_root = tmpdir / "port" / root.name
                _copy_tree(root, port_root)
                fixed = run(paths, settings, fix=rewrite, write=False, jobs=jobs) if rewrite else Run()
                for res in fixed.files:
                    if res.changed:
                        dest = _moved(Path(res.path), root, port_root)
                        if dest.is_symlink():
                            dest.unlink()
                        dest.write_bytes(res.new or b"")
                port_paths = [str(_moved(Path(p), root, port_root)) for p in paths]
            left = run(port_paths, settings, jobs=jobs)  # the port as it now is
            port_argv = on_target(args, target) if rewrite else args
            port = _start(tmpdir, "port", _moved(script_path, root, port_root), port_argv,
                          _moved(cwd, root, port_root), port_root, vendor, None if in_place else root)
            port_result = _finish(port, timeout)
        finally:
            ref_result = _finish(reference, timeout)
        if not in_place:  # what the port's run says, told at the original's paths
            for key in ("error", "details"):
                if isinstance(port_result.get(key), str):
                    port_result[key] = port_result[key].replace(str(port_root), str(root))
        ran_lines = {f: set(lines) for f, lines in port_result.get("lines", {}).items()}
        device = (port_result.get("stats") or {}).get("device") or target.device  # xpu is rehearsed as xpusim
        v = Verification(vendor, str(script), args, fixed, ref_result, port_result, device=device,
                         in_place=in_place, reference_argv=cpu_argv if cpu_argv != args else None,
                         port_argv=port_argv if port_argv != args else None)
        for f in left.findings:
            if not f.blocking or not is_cuda_use(f.code):
                continue
            real = os.path.realpath(f.path)
            ran = ran_lines.get(real, set())
            shown = f if in_place else _shown(f, port_root, root)
            if any(n in ran for n in _lines_of_use(real, f)):
                missing = _not_installed(real, f, (Path(real).parent, port_root))
                if missing:
                    v.not_imported.append((shown, missing))
                else:
                    v.cuda_left.append(shown)
            else:
                v.not_reached.append(shown)
    return v


def _not_installed(path: str, f: Finding, folders: tuple[Path, ...]) -> str | None:
    """The top-level module of an import statement at the finding's line that this environment does not have (nor
    the program's own folders): where the run reached that line and went on, the import raised and was handled (a
    try/except ImportError fallback, as pytorch_pretrained's ``from apex... import FusedLayerNorm``), so nothing of
    it ran. None for any other line."""
    try:
        modules = _imports(path, os.stat(path).st_mtime_ns).get(f.line, ())
    except OSError:
        return None
    for module in modules:
        top = module.split(".")[0]
        if any((d / top).is_dir() or (d / f"{top}.py").is_file() for d in folders):
            continue
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return top
    return None


@lru_cache(maxsize=256)
def _imports(path: str, mtime: int) -> dict[int, tuple[str, ...]]:
    """Line -> the absolute modules an import statement on it imports, in the file as it is at ``mtime``."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[int, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = tuple(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = (node.module,)
        else:
            continue
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            out[line] = modules
    return out


def _lines_of_use(path: str, f: Finding) -> range | list[int]:
    """The lines whose run means the finding's code was used: its own, save for a base class in a class statement
    (``class Balanced(DataParallel):``), which runs at import and uses nothing until an object of the class runs
    one of its methods: the lines of the class's methods then (its own where it has none)."""
    own = range(f.line, f.end_line + 1)
    try:
        bases = _class_bases(path, os.stat(path).st_mtime_ns)
    except OSError:
        return own
    for line, start, end, used in bases:
        if line == f.line and start <= f.col - 1 < end:
            return used or own
    return own


@lru_cache(maxsize=256)
def _class_bases(path: str, mtime: int) -> list[tuple[int, int, int, list[int]]]:
    """Each base of each class statement in the file as it is at ``mtime``: (line, first and end column, 0-based,
    and the lines of the class's methods' statements)."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return []
    out = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        methods = [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        used = [s.lineno for m in methods for s in ast.walk(m) if isinstance(s, ast.stmt) and s is not m]
        out += [(b.lineno, b.col_offset, b.end_col_offset or 0, used) for b in (*cls.bases,
                                                                                 *(k.value for k in cls.keywords))]
    return out


# -- the copies and the runs ----------------------------------------------------------------------------
def on_cpu(argv: list[str], target: Any) -> list[str]:
    """The arguments of the original's CPU run: an argument whose value names a device (``--device=npu``, ``--device
    cuda:0``) names the CPU, one that names a collective backend (``--backend=hccl``, ``nccl``) names gloo."""
    return _mapped(argv, {"cuda", target.device}, "cpu", {"nccl", target.dist_backend} - {""}, "gloo")


def on_target(argv: list[str], target: Any) -> list[str]:
    """The arguments of the port's run, as the port is launched: an argument whose value names CUDA (``--device
    cuda:0``, ``--device=cuda``) names the target's device (``npu:0``), one that names NCCL the target's collective
    backend, as `fix` rewrote the same strings in the code (an argparse ``choices`` list, a default) the
    arguments are checked against. Values that name the target already, or anything else, stay."""
    return _mapped(argv, {"cuda"}, target.device, {"nccl"}, target.dist_backend or "nccl")


def _mapped(argv: list[str], devices: set[str], device: str, backends: set[str], backend: str) -> list[str]:
    """``argv`` with each device value of ``devices`` (with or without its index) as ``device`` (its index kept
    unless ``device`` is the CPU), and each backend of ``backends`` as ``backend``."""

    def value(v: str) -> str:
        kind, _, index = v.partition(":")
        if kind in devices and (not index or index.isdigit()):
            return device if device == "cpu" or not index else f"{device}:{index}"
        return backend if v in backends else v

    out = []
    for a in argv:
        if a.startswith("-") and "=" in a:
            k, v = a.split("=", 1)
            out.append(f"{k}={value(v)}")
        else:
            out.append(a if a.startswith("-") else value(a))
    return out


def _moved(path: Path, root: Path, new_root: Path) -> Path:
    """``path`` (under ``root``) at its place under ``new_root``; a path outside ``root`` as it is."""
    real = path.resolve()
    try:
        return new_root / real.relative_to(root)
    except ValueError:
        return real


def _shown(f: Finding, port_root: Path, root: Path) -> Finding:
    """A finding of the copy, told at the original's path."""
    from dataclasses import replace

    path = _moved(Path(f.path), port_root, root)
    try:
        path = path.relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    return replace(f, path=str(path))


def _copy_tree(root: Path, dest: Path) -> None:
    """A copy of ``root`` to run in: version control, caches and virtual environments left out, large files
    linked rather than copied."""
    skip = {*VCS_DIRS, *DEFAULT_EXCLUDE}

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in skip or os.path.isfile(os.path.join(folder, n, "pyvenv.cfg"))}

    def copy(src: str, dst: str) -> None:
        if os.path.getsize(src) > LINK_OVER:
            os.symlink(os.path.realpath(src), dst)
        else:
            shutil.copy2(src, dst)

    try:
        shutil.copytree(root, dest, ignore=ignore, copy_function=copy, symlinks=True)
    except (OSError, shutil.Error) as e:
        raise InputError(f"{root}: cannot copy the tree to rehearse it: {e}") from None


@dataclass
class _Child:
    proc: subprocess.Popen
    out: Path
    log: Path
    started: float


def _start(tmpdir: Path, name: str, script: Path, argv: list[str], cwd: Path, root: Path,
           target: str | None, origin: Path | None = None) -> _Child:
    """Run ``script`` in ``root`` (a copy of ``origin``, or the tree itself) in a process of its own."""
    out, log = tmpdir / f"{name}.json", tmpdir / f"{name}.log"
    run_cwd = cwd if cwd.is_dir() else root
    # origin: the tree this one copies; the run's sys.path has none of its folders, each moved to its place in the
    # copy (verify_run.isolate), so that a run of the original can never import the port being written in place
    spec = {"script": str(script), "argv": argv, "cwd": str(run_cwd), "root": str(root),
            "origin": str(origin.resolve()) if origin is not None else None, "target": target, "out": str(out)}
    (tmpdir / f"{name}.spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONHASHSEED": "0"}  # no GPU; the same hashes
    if env.get("PYTHONPATH"):  # absolute (the run starts in its own folder); the program's own: those of this copy
        env["PYTHONPATH"] = os.pathsep.join(
            (str(_moved(Path(p), origin, root)) if origin is not None else str(Path(p).resolve())) if p else p
            for p in env["PYTHONPATH"].split(os.pathsep))
    own = _own_root()
    if own is not None:  # opaudit found through the caller's folder only (a source checkout): found there still
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), own) if p)
    with open(log, "wb") as f:
        spec_path = str(tmpdir / f"{name}.spec.json")
        # started in its own folder, not the caller's: `-m` puts the starting folder first on sys.path
        proc = subprocess.Popen([sys.executable, "-m", "opaudit.rehearsal.verify_run", spec_path],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=str(run_cwd), start_new_session=True)
    return _Child(proc, out, log, time.monotonic())


def _own_root() -> str | None:
    """The folder opaudit's package is in, where the working folder is that folder (a source checkout, perhaps not
    installed: `python -m` found it there, and a run started elsewhere would not); else None (found elsewhere,
    as the run will find it: installed, or on PYTHONPATH)."""
    import opaudit

    root = Path(opaudit.__file__).resolve().parent.parent
    return str(root) if root == Path.cwd().resolve() else None


def _finish(child: _Child, timeout: float | None) -> dict[str, Any]:
    left = None if timeout is None else max(1.0, timeout - (time.monotonic() - child.started))
    try:
        child.proc.wait(left)
    except subprocess.TimeoutExpired:
        os.killpg(child.proc.pid, signal.SIGKILL)
        child.proc.wait()
        return {"ok": False, "error": f"still running after {timeout:g} s (--timeout)"}
    except BaseException:  # interrupted: the run goes with it
        os.killpg(child.proc.pid, signal.SIGKILL)
        raise
    try:
        return dict(json.loads(child.out.read_text()))
    except (OSError, ValueError):
        tail = child.log.read_text(errors="replace").strip().splitlines()[-8:]
        return {"ok": False, "error": f"the run ended with status {child.proc.returncode} before reporting"
                + (": " + " / ".join(tail) if tail else "")}
