"""Lint and fix --diff throughput of `opaudit` against TorchFix on a corpus of real packages.

    python bench/lint_throughput.py [--rounds 3] [--limit N] [--corpus DIR ...] [--jobs N]
                                    [--torchfix /work/torchfix-venv/bin/torchfix]
                                    [--out bench/results/lint_throughput.json]
    python bench/lint_throughput.py --corpus-check [--limit N] [--corpus DIR ...]
                                    [--out bench/results/lint_corpus.json]

The corpus (default: the venv's transformers package and every package under
/work/lint-corpus/site, see that folder's MANIFEST.json) is copied once into a temporary folder,
and every command gets the same explicit list of its .py files (sorted; --limit N keeps the first
N), run from that folder, each command in a fresh process, interleaved in each round; the wall
times are the median of the rounds. Both tools get the same job count (--jobs, default: the
machine's cores).

TorchFix (its own venv, it pins libcst < 1.6) has one path for both: without --fix it lints and
prints a diff of its fixes, so `torchfix -j N <files>` is its lint and its fix --diff at once; it
is also run with `--select ALL`. TorchFix only parses the files that contain the string "torch";
the others are read and skipped, and still count in its files/s, as they do in opaudit's.
Goals: opaudit lint and opaudit fix --target ascend --diff each >= 3x TorchFix's files/s.
TorchFix is slow: one round on the whole corpus (4,747 files, 91 MB) costs about 35 minutes of
TorchFix on 2 cores (both selections), so --rounds 1 there, or --limit N for quicker rounds.

--corpus-check measures no time: it runs `opaudit lint` and `opaudit fix --target ascend --diff`
over the corpus and reports crashes (an exit status other than 0 and 1), then runs
`opaudit fix --target ascend DIR` twice on a copy and checks that every file still parses and
that the second fix changes nothing.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"lint_over_torchfix": 10.0, "fix_diff_over_torchfix": 10.0}  # the goal the project set: >= 10x TorchFix
SITE = Path("/work/lint-corpus/site")
TORCHFIX = "/work/torchfix-venv/bin/torchfix"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TORCHFIX_FINDING = re.compile(r"^(.+?):(\d+):(\d+): (TOR\d+)")
ARG_MAX_SAFE = 1_500_000  # bytes of file paths on one command line before falling back to the folder


# --- corpus ---------------------------------------------------------------------------------------

def default_corpus() -> list[Path]:
    roots = []
    spec = importlib.util.find_spec("transformers")
    if spec and spec.submodule_search_locations:
        roots.append(Path(list(spec.submodule_search_locations)[0]))
    if SITE.is_dir():
        roots += sorted(p for p in SITE.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", ".egg-info"))
                        and p.name not in ("bin", "__pycache__") and any(p.rglob("*.py")))
    return roots


def package_version(root: Path) -> str | None:
    norm = root.name.replace("-", "_").lower()
    for d in root.parent.glob("*.dist-info"):
        name, _, ver = d.name[: -len(".dist-info")].partition("-")
        if name.replace("-", "_").lower() == norm:
            return ver
    try:
        from importlib.metadata import version
        return version(root.name)
    except Exception:
        return None


def stage(roots: list[Path], limit: int | None, dest: Path) -> tuple[list[str], list[dict]]:
    """Copy the corpus's .py files into dest/<package>/...; returns the sorted relative paths used."""
    entries = []  # (relative path in dest, source)
    names = set()
    for root in roots:
        name = root.name
        while name in names:
            name += "_"
        names.add(name)
        for p in root.rglob("*.py"):
            if p.is_file():
                entries.append((f"{name}/{p.relative_to(root).as_posix()}", p, name, root))
    entries.sort(key=lambda e: e[0])
    if limit:
        entries = entries[:limit]
    packages: dict[str, dict] = {}
    for rel, src, name, root in entries:
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out)
        pk = packages.setdefault(name, {"package": name, "version": package_version(root), "path": str(root),
                                        "files": 0, "bytes": 0})
        pk["files"] += 1
        pk["bytes"] += out.stat().st_size
    return [e[0] for e in entries], list(packages.values())


def path_args(files: list[str]) -> tuple[list[str], str]:
    """The files themselves, or the staging folder (which holds exactly them) when the list is too long."""
    if sum(len(f) + 1 for f in files) > ARG_MAX_SAFE:
        return ["."], "folder"
    return files, "files"


# --- running ------------------------------------------------------------------------------------

def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault("NO_COLOR", "1")
    return e


def run(argv: list[str], cwd: Path, out: Path, timeout: float) -> dict:
    """One command in a fresh process, stdout and stderr to files; wall seconds and exit status."""
    t = time.perf_counter()
    rc: int | str
    with open(out.with_suffix(".stdout"), "wb") as so, open(out.with_suffix(".stderr"), "wb") as se:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, stdout=so, stderr=se, env=env(), start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own group: TorchFix's pool workers too
                proc.wait()
                rc = "timeout"
        except OSError as exc:
            se.write(f"{type(exc).__name__}: {exc}".encode())
            rc = "oserror"
    return {"wall_s": time.perf_counter() - t, "rc": rc}


def tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def count_torchfix(stdout: Path, stderr: Path) -> dict:
    text = ANSI.sub("", stdout.read_text(errors="replace"))
    codes: dict[str, int] = {}
    findings = 0
    for line in text.splitlines():
        m = TORCHFIX_FINDING.match(line)
        if m:
            findings += 1
            codes[m.group(4)] = codes.get(m.group(4), 0) + 1
    err = ANSI.sub("", stderr.read_text(errors="replace"))
    checked = re.search(r"Finished checking (\d+) files", err)
    fixable = re.search(r"(\d+) potentially fixable", err)
    return {"findings": findings, "by_code": dict(sorted(codes.items())),
            "diff_files": sum(1 for line in text.splitlines() if line.startswith("+++ ")),
            "files_parsed": int(checked.group(1)) if checked else 0,
            "files_fixable": int(fixable.group(1)) if fixable else 0}


def count_opaudit(stdout: Path, is_json: bool) -> dict:
    text = stdout.read_text(errors="replace")
    res: dict = {}
    if is_json:
        try:
            data = json.loads(text)
            items = data if isinstance(data, list) else data.get("findings") if isinstance(data, dict) else None
            if isinstance(items, list):
                res["findings"] = len(items)
                codes: dict[str, int] = {}
                for it in items:
                    code = (it.get("code") or it.get("rule") or it.get("id")) if isinstance(it, dict) else None
                    if isinstance(code, str):
                        codes[code] = codes.get(code, 0) + 1
                if codes:
                    res["by_code"] = dict(sorted(codes.items()))
                return res
        except (ValueError, AttributeError):
            res["json_error"] = "stdout is not JSON (or has no findings list); counted lines"
    lines = [ln for ln in ANSI.sub("", text).splitlines() if ln.strip()]
    res["findings" if is_json else "lines"] = len(lines)
    if not is_json:
        res["diff_files"] = sum(1 for ln in lines if ln.startswith("+++ "))
    return res


def supports_jobs(cmd: str) -> bool:
    try:
        h = subprocess.run([sys.executable, "-m", "opaudit", cmd, "--help"], capture_output=True, text=True,
                           cwd=ROOT, env=env(), timeout=120)
    except Exception:
        return False
    return h.returncode == 0 and "--jobs" in ANSI.sub("", h.stdout)


def tool_versions(torchfix: str) -> dict:
    v: dict = {}
    try:
        v["torchfix"] = subprocess.run([torchfix, "--version"], capture_output=True, text=True).stdout.strip()
        tfpy = Path(torchfix).parent / "python"
        v["torchfix_libcst"] = subprocess.run(
            [str(tfpy), "-c", "from importlib.metadata import version; print(version('libcst'))"],
            capture_output=True, text=True).stdout.strip()
    except OSError as exc:
        v["torchfix"] = f"unavailable: {exc}"
    try:
        from importlib.metadata import version
        v["opaudit"] = version("opaudit")
        v["libcst"] = version("libcst")
    except Exception:
        pass
    try:
        v["opaudit_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                             cwd=ROOT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "opaudit"], capture_output=True, text=True,
                               cwd=ROOT).stdout.strip()
        if dirty:
            v["opaudit_commit"] += "+dirty"
    except OSError:
        pass
    return v


# --- throughput ---------------------------------------------------------------------------------

def throughput(args, roots: list[Path]) -> dict:
    jobs = args.jobs or os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="opaudit-lint-bench-"))
    try:
        corpus = work / "corpus"
        logs = work / "logs"
        corpus.mkdir()
        logs.mkdir()
        files, packages = stage(roots, args.limit, corpus)
        paths, mode = path_args(files)
        nbytes = sum(p["bytes"] for p in packages)
        torch_files = sum(1 for f in files if b"torch" in (corpus / f).read_bytes())
        op_lint_jobs = ["--jobs", str(jobs)] if supports_jobs("lint") else []
        op_fix_jobs = ["--jobs", str(jobs)] if supports_jobs("fix") else []
        py = [sys.executable, "-m", "opaudit"]
        commands = {}
        if not args.skip_torchfix:
            commands["torchfix"] = [args.torchfix, "-j", str(jobs), *paths]
            commands["torchfix_select_all"] = [args.torchfix, "-j", str(jobs), "--select", "ALL", *paths]
        if not args.skip_opaudit:
            commands["opaudit_lint"] = [*py, "lint", *paths, "--exit-zero", "--output-format", "json", *op_lint_jobs]
            commands["opaudit_fix_diff"] = [*py, "fix", "--target", "ascend", "--diff", *paths, *op_fix_jobs]
        walls: dict[str, list[float]] = {k: [] for k in commands}
        last: dict[str, dict] = {}
        failed: dict[str, str] = {}
        names = list(commands)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]  # rotate who goes first
            for name in order:
                if name in failed:
                    continue
                res = run(commands[name], corpus, logs / name, args.timeout)
                ok_rc = (0, 1)  # torchfix: 1 = some file failed to parse; opaudit: 1 = findings
                if res["rc"] not in ok_rc:
                    failed[name] = f"exit status {res['rc']}: {tail((logs / name).with_suffix('.stderr'))}"
                    continue
                walls[name].append(res["wall_s"])
                last[name] = res
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{k} {walls[k][-1]:.2f} s" if k not in failed else f"{k} failed" for k in names), file=sys.stderr)

        cmd_results = {}
        for name, argv in commands.items():
            i = argv.index(paths[0])
            shown = argv[:i] + [f"<{len(files)} files>" if mode == "files" else "."] + argv[i + len(paths):]
            c: dict = {"argv": shown}
            if name in failed:
                c["error"] = failed[name]
            if walls[name]:
                wall = statistics.median(walls[name])
                c.update({"wall_s": round(wall, 3), "rounds_s": [round(w, 3) for w in walls[name]],
                          "files_per_s": round(len(files) / wall, 1), "mb_per_s": round(nbytes / wall / 1e6, 2),
                          "rc": last[name]["rc"]})
                so, se = (logs / name).with_suffix(".stdout"), (logs / name).with_suffix(".stderr")
                if name.startswith("torchfix"):
                    c.update(count_torchfix(so, se))
                else:
                    c.update(count_opaudit(so, is_json=name == "opaudit_lint"))
                if last[name]["rc"] == 1 and name.startswith("torchfix"):
                    c["note"] = "exit 1: TorchFix failed to parse or transform at least one file"
            cmd_results[name] = c

        def ratio(a: str, b: str) -> float | None:
            fa, fb = cmd_results.get(a, {}).get("files_per_s"), cmd_results.get(b, {}).get("files_per_s")
            return round(fa / fb, 2) if fa and fb else None

        result = {
            "benchmark": "lint_throughput",
            "rounds": args.rounds,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "jobs": jobs,
            "opaudit_jobs_flag": {"lint": bool(op_lint_jobs), "fix": bool(op_fix_jobs)},
            "versions": tool_versions(args.torchfix),
            "corpus": {"packages": packages, "files": len(files), "bytes": nbytes, "limit": args.limit,
                       "files_containing_torch": torch_files, "passed_as": mode},
            "commands": cmd_results,
            "torchfix_fix_diff": "same command as `torchfix`: without --fix TorchFix lints and prints its diffs",
            "lint_over_torchfix": ratio("opaudit_lint", "torchfix"),
            "fix_diff_over_torchfix": ratio("opaudit_fix_diff", "torchfix"),
            "lint_over_torchfix_select_all": ratio("opaudit_lint", "torchfix_select_all"),
            "goals": GOALS,
        }
        result["ok"] = {k: result[k] is not None and result[k] >= v for k, v in GOALS.items()}
        return result
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


# --- corpus check -------------------------------------------------------------------------------

def hashes(d: Path) -> dict[str, str]:
    return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in d.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def parse_error(path: Path) -> str | None:
    try:
        ast.parse(path.read_bytes(), filename=str(path))
        return None
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def corpus_check(args, roots: list[Path]) -> dict:
    jobs = args.jobs or os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="opaudit-lint-check-"))
    try:
        corpus, fixed, logs = work / "corpus", work / "fixed", work / "logs"
        corpus.mkdir()
        logs.mkdir()
        files, packages = stage(roots, args.limit, corpus)
        paths, mode = path_args(files)
        shutil.copytree(corpus, fixed)
        py = [sys.executable, "-m", "opaudit"]
        jl = ["--jobs", str(jobs)] if supports_jobs("lint") else []
        jf = ["--jobs", str(jobs)] if supports_jobs("fix") else []
        runs = {
            "lint": [*py, "lint", *paths, *jl],
            "lint_json": [*py, "lint", *paths, "--output-format", "json", *jl],
            "fix_diff": [*py, "fix", "--target", "ascend", "--diff", *paths, *jf],
        }
        crashes = []
        report: dict = {}
        for name, argv in runs.items():
            res = run(argv, corpus, logs / name, args.timeout)
            report[name] = {"rc": res["rc"], "wall_s": round(res["wall_s"], 2)}
            if res["rc"] not in (0, 1):
                crashes.append({"command": name, "rc": res["rc"],
                                "stderr_tail": tail((logs / name).with_suffix(".stderr"))})
            else:
                report[name].update(count_opaudit((logs / name).with_suffix(".stdout"), is_json=name == "lint_json"))
        changed_by_diff_cmd = hashes(corpus)

        originals_unparsable = {f: e for f in files if (e := parse_error(corpus / f))}
        h0 = hashes(fixed)
        fix_argv = [*py, "fix", "--target", "ascend", ".", *jf]
        snapshots: dict[str, bytes] = {}
        h = [h0]
        for i in (1, 2):
            res = run(fix_argv, fixed, logs / f"fix{i}", args.timeout)
            report[f"fix_run{i}"] = {"rc": res["rc"], "wall_s": round(res["wall_s"], 2)}
            if res["rc"] not in (0, 1):
                crashes.append({"command": f"fix run {i}", "rc": res["rc"],
                                "stderr_tail": tail((logs / f"fix{i}").with_suffix(".stderr"))})
            h.append(hashes(fixed))
            if i == 1:
                snapshots = {f: (fixed / f).read_bytes() for f in h[1] if h[1].get(f) != h0.get(f)}
        h1, h2 = h[1], h[2]
        changed = sorted(f for f in set(h0) | set(h1) if h0.get(f) != h1.get(f))
        parse_failures = []
        for f in changed:  # checked on the content the first fix wrote
            if f not in h1:
                parse_failures.append({"file": f, "error": "deleted by fix"})
            elif f.endswith(".py") and f not in originals_unparsable:
                try:
                    ast.parse(snapshots[f])
                except (SyntaxError, ValueError) as exc:
                    parse_failures.append({"file": f, "error": f"{type(exc).__name__}: {exc}"})
        idem = []
        for f in sorted(set(h1) | set(h2)):
            if h1.get(f) != h2.get(f):
                before = snapshots.get(f) or ((corpus / f).read_bytes() if (corpus / f).exists() else b"")
                after = (fixed / f).read_bytes() if (fixed / f).exists() else b""
                d = list(difflib.unified_diff(before.decode(errors="replace").splitlines(),
                                              after.decode(errors="replace").splitlines(), f"{f} (fix 1)",
                                              f"{f} (fix 2)", n=1, lineterm=""))
                idem.append({"file": f, "diff_head": d[:30]})
        written_by_diff = sorted(f for f in files if changed_by_diff_cmd.get(f) != h0.get(f))
        per_pkg: dict[str, int] = {}
        for f in changed:
            per_pkg[f.split("/", 1)[0]] = per_pkg.get(f.split("/", 1)[0], 0) + 1
        result = {
            "benchmark": "lint_corpus",
            "python": platform.python_version(),
            "versions": tool_versions(args.torchfix),
            "corpus": {"packages": packages, "files": len(files), "bytes": sum(p["bytes"] for p in packages),
                       "limit": args.limit, "passed_as": mode,
                       "originals_unparsable": [{"file": f, "error": e}
                                                for f, e in sorted(originals_unparsable.items())]},
            "commands": report,
            "crashes": crashes,
            "files_changed": len(changed),
            "files_created": sorted(set(h1) - set(h0)),
            "files_changed_by_package": dict(sorted(per_pkg.items())),
            "files_changed_by_fix_diff": written_by_diff,  # --diff must not write: this should be empty
            "parse_failures": parse_failures,
            "idempotency_failures": idem,
        }
        result["ok"] = {"no_crashes": not crashes, "fixed_files_parse": not parse_failures,
                        "second_fix_changes_nothing": not idem, "diff_writes_nothing": not written_by_diff}
        return result
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--corpus", nargs="+", type=Path, default=None,
                    help="package folders (default: transformers and the packages of /work/lint-corpus/site)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N .py files, in sorted order")
    ap.add_argument("--jobs", type=int, default=None, help="jobs for both tools (default: the machine's cores)")
    ap.add_argument("--torchfix", default=TORCHFIX)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for one command")
    ap.add_argument("--skip-torchfix", action="store_true")
    ap.add_argument("--skip-opaudit", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (corpus copy and logs)")
    ap.add_argument("--corpus-check", action="store_true",
                    help="no timing: crashes, fixed files that do not parse, and a second fix that changes something")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    roots = [p.resolve() for p in args.corpus] if args.corpus else default_corpus()
    if not roots:
        sys.exit("no corpus: pass --corpus DIR ... (see /work/lint-corpus/MANIFEST.json)")
    if args.corpus_check:
        result = corpus_check(args, roots)
        out = args.out or str(ROOT / "bench" / "results" / "lint_corpus.json")
    else:
        result = throughput(args, roots)
        out = args.out or str(ROOT / "bench" / "results" / "lint_throughput.json")
    print(json.dumps(result, indent=1))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
