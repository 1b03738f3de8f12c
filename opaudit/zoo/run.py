"""Many models against many targets: each model traced and audited in a process of its own.

A :class:`Job` is one model: its spec, how to trace it, the targets, a timeout and a memory cap. :func:`run_job`
runs it in a fresh child process (forked from a server that has torch and transformers imported already), which
caps its own address space (``resource.setrlimit``) and is killed at the timeout; whatever happens, a record comes
back: the verdict per target, or ``status="failed"`` with the reason. The executors only decide where
:func:`run_job` runs: threads of this process (``local``) or Ray tasks (``ray``); the results are the same.

Records are cached by (spec, configuration hash, torch version, opaudit version, coverage_db version and the
trace options): a rerun only traces what changed. A failure from the timeout or the memory cap is cached with the
limits it ran under and taken from the cache only by a run whose limits are no larger (a longer timeout or a
larger cap runs the model again); a crash is never cached.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import opaudit
from opaudit.errors import InputError, OpauditError, describe_exception

EXECUTORS = ("local", "ray")
DEFAULT_TIMEOUT = 600.0
START_TIMEOUT = 300.0  # seconds a model's process may take to start (the fork server's imports, on a busy machine)
RECORD_VERSION = 4  # 2: a model meta cannot run is traced for real; 3: records name their configuration fixes;
# 4: records name the cut of --shrink
# ops of the audit's per-target lists that a zoo keeps (what blocks a model, what the data does not know)
KEPT = ("missing", "skew", "unknown", "fallback")
RETRY_SHARE = 0.6  # of the memory a model meta cannot run may take to be traced for real


@dataclass
class Job:
    spec: str
    key: str  # the cache key
    family: str
    head: str
    kind: str
    config_hash: str
    targets: list[str]  # release keys
    train: bool = True
    mode: str = "auto"
    device: str = "cuda"
    timeout: float = DEFAULT_TIMEOUT
    memory: int | None = None  # bytes of address space
    threads: int = 1
    config_fixes: dict[str, Any] = field(default_factory=dict)  # fixes of the default configuration (hf)
    shrink: bool = False  # cut the configuration until the model runs for real (shrink.py), the cut recorded


@dataclass
class ZooResult:
    records: list[dict[str, Any]]  # one per spec, in the order given
    targets: list[str]
    train: bool
    cached: int = 0
    wall_s: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["status"] != "ok"]


# -- cache keys ------------------------------------------------------------------------------------------


def coverage_db_version(root: Path | None = None) -> str:
    """A hash of coverage_db's index and release files: changes whenever a verdict could."""
    from opaudit.data import data_dir

    root = root or data_dir("coverage_db")
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.toml")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def job_key(spec: str, config_hash: str, *, targets: Sequence[str], train: bool, mode: str, device: str,
            db_version: str, shrink: bool = False) -> str:
    import torch

    parts = {"spec": spec, "config": config_hash, "torch": torch.__version__, "opaudit": opaudit.__version__,
             "coverage_db": db_version, "targets": list(targets), "train": train, "mode": mode, "device": device,
             "record": RECORD_VERSION, "shrink": shrink}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


# -- one model, in its own process -----------------------------------------------------------------------


def work(job: Job) -> dict[str, Any]:
    """Trace and audit one model here, in this process: the record (raises nothing a model can cause)."""
    import torch

    record = _base(job)
    started = time.perf_counter()
    torch.set_num_threads(max(1, job.threads))
    cuts: list[tuple[str, str, dict[str, Any]]] = [("", job.spec, {})]
    if job.shrink:
        from opaudit.zoo.shrink import levels

        cuts = levels(job.spec)
    tried: list[dict[str, Any]] = []
    for i, (level, spec, sets) in enumerate(cuts):
        if level:
            record["cut"] = {"level": level, "set": sets, "tried": tried}
        try:
            trace, result, retried = _traced(job, spec, record)
            break
        except (OpauditError, MemoryError, Exception) as e:  # a model's failure is a record, not the zoo's end
            message = e.message if isinstance(e, OpauditError) else describe_exception(e)
            reason = _reason(message, e)
            if i + 1 < len(cuts) and reason not in ("package", "memory", "spec"):
                # a cut the configuration's cross-checks refuse at run time: the next, less cut, level
                tried.append({"level": level, "reason": reason, "error": message[:500]})
                continue
            record.update(status="failed", reason=reason, error=message)
            record["duration_s"] = round(time.perf_counter() - started, 2)
            return record
    m = trace.meta
    reason = m.mode_reason if retried is None else f"meta could not run it ({retried}); traced for real"
    if job.shrink and job.mode == "auto" and m.mode == "real" and retried is None:
        reason = "cut by --shrink: its step fits the memory cap"
    record.update(status="ok", mode=m.mode, mode_reason=reason, calls=m.total_calls,
                  ops=len({g.op for g in result.groups if g.kind not in ("choice", "api")}),
                  duration_s=round(time.perf_counter() - started, 2))
    record["targets"] = [
        {"target": v.target, "vendor": v.vendor, "release": v.release, "torch": v.torch, "verdict": v.verdict,
         "summary": v.summary, **{k: _ops(getattr(v, k)) for k in KEPT}}
        for v in result.selected_verdicts
    ]
    return record


def _traced(job: Job, spec: str, record: dict[str, Any]) -> tuple[Any, Any, str | None]:
    """Trace and audit ``spec`` as ``job`` asks: the trace, the audit and the meta error a real run followed."""
    from opaudit import api
    from opaudit.auditing import audit
    from opaudit.tracing.modes import needs_data
    from opaudit.zoo.specs import load_spec

    named = load_spec(spec)
    record["config_fixes"] = named.fixes

    def traced(mode: str) -> Any:
        return api.trace(named.make_model, named.make_inputs, train=job.train, mode=mode,
                             loss_fn=named.loss_fn, optimizer=named.optimizer, source=named.source,
                             device=job.device)

    retried = None
    mode = job.mode
    if job.shrink and mode == "auto" and _fits(named, job):
        # a cut model: traced for real wherever its step fits the memory cap, not only within auto's comfort
        mode = "real"
    try:
        trace = traced(mode)
    except OpauditError as e:
        if job.mode != "auto" or not needs_data(e.message) or not _fits(named, job):
            raise
        # meta tensors hold no data: a model that reads its values (a MoE's routing as a list) is traced
        # for real where it fits in the memory cap
        retried = e.message
        trace = traced("real")
    return trace, audit(trace, job.targets, landscape=False), retried


def _fits(named: Any, job: Job) -> bool:
    """Whether the model's step fits for real: its parameters, gradients and AdamW states (measured on meta)
    within RETRY_SHARE of the memory cap or of what the machine has available, the smaller. Looser than the
    auto rule's comfort: the alternative is no trace at all."""
    import torch

    from opaudit.tracing.modes import available_memory, model_bytes

    try:
        with torch.device("meta"):
            model = named.make_model()
    except Exception:  # noqa: BLE001 - the real run would fail the same way, and say so
        return True
    limits = [m for m in (job.memory, available_memory()) if m]
    need = model_bytes(model)[1] * (4 if job.train else 1)
    return not limits or need <= RETRY_SHARE * min(limits)


def _ops(labels: list[str]) -> list[str]:
    """The audit's op labels (``view (forward)``, ``mm (backward, within ...)``) as op names, phases together."""
    return list(dict.fromkeys(label.rsplit(" (", 1)[0] for label in labels))


def _base(job: Job) -> dict[str, Any]:
    import torch

    return {"spec": job.spec, "key": job.key, "kind": job.kind, "family": job.family, "head": job.head,
            "config_hash": job.config_hash, "train": job.train, "torch": torch.__version__,
            "opaudit": opaudit.__version__, "config_fixes": job.config_fixes, "cut": None, "status": "failed",
            "reason": None,
            "error": None, "mode": None,
            "mode_reason": None, "calls": 0, "ops": 0, "duration_s": 0.0, "targets": []}


def _reason(message: str, e: BaseException | None = None) -> str:
    """A failure's reason in a word, for counting them: memory, input, build, forward, loss, backward, ..."""
    text = message.lower()
    if isinstance(e, MemoryError) or "can't allocate memory" in text or "out of memory" in text:
        return "memory"
    if re.search(r"requires the \w+ library but it was not found|no module named", text):
        return "package"  # a library the model needs (timm, natten) is not installed: not the model's fault
    for stage, word in (("building the model", "build"), ("the forward pass", "forward"), ("the loss", "loss"),
                        ("the backward pass", "backward"), ("the optimizer", "optimizer")):
        if stage in text:
            return word
    if "cannot make the input" in text:
        return "inputs"
    if isinstance(e, InputError):
        return "spec"
    return "error"


def _watch(parent: int) -> None:
    """End this process when the zoo that started it is gone (killed, interrupted): no orphan traces on."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(2)
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=watch, daemon=True).start()


def _child(job: Job, conn: Any, parent: int | None = None) -> None:
    import resource

    if parent is not None:
        _watch(parent)
    conn.send("started")  # the timeout counts from here, not from the fork server's own start
    if job.memory:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (job.memory, job.memory))
        except (ValueError, OSError):
            pass
    try:
        record = work(job)
    except BaseException as e:  # noqa: BLE001 - the parent must hear of anything, even a KeyboardInterrupt
        record = {**_base(job), "reason": _reason(describe_exception(e), e), "error": describe_exception(e)}
    conn.send(record)
    conn.close()


_CONTEXT: Any = None
_PRELOAD: list[str] = []  # more modules for the fork server, named by the first zoo of this process (timm's)


def _context() -> Any:
    """Children forked from a server that imported torch, transformers and opaudit once (a model's process
    starts in milliseconds, not the seconds of those imports)."""
    global _CONTEXT
    if _CONTEXT is None:
        methods = multiprocessing.get_all_start_methods()
        _CONTEXT = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if "forkserver" in methods:
            # transformers' modeling_utils alone takes seconds to import: once here, not once per model
            # so are the modules every trace on the CUDA path imports (the simulated device, the lint rules
            # its collectives read, the dtype data): 1-2 s a model otherwise, as long as a small model's trace
            _CONTEXT.set_forkserver_preload(["torch", "transformers", "transformers.modeling_utils",
                                             "transformers.models.auto.modeling_auto", "transformers.generation.utils",
                                             "transformers.masking_utils", "transformers.modeling_layers",
                                             "transformers.processing_utils", "opaudit.auditing", "opaudit.tracing",
                                             "opaudit.rehearsal.simulator", "opaudit.rehearsal.device",
                                             "opaudit.lint.engine", "opaudit.lint.rules", "opaudit.matrix.cuda_dtypes",
                                             "opaudit.matrix.probe", "opaudit.zoo.specs", "opaudit.zoo.shrink",
                                             "opaudit.zoo.run", *_PRELOAD, "opaudit.zoo._warm"])
    return _CONTEXT


def run_job(job: Job) -> dict[str, Any]:
    """Run ``job`` in a child process of its own: its record, or a failed one (timeout, memory, crash)."""
    ctx = _context()
    started = time.perf_counter()
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(job, send, os.getpid()), daemon=True)
    process.start()
    send.close()
    record: dict[str, Any] | None = None
    timed_out = False
    try:
        # the first job of a run waits for the fork server to import torch and transformers: not its own time
        if receive.poll(max(START_TIMEOUT, job.timeout)) and receive.recv() == "started":
            started = time.perf_counter()
            if receive.poll(job.timeout):
                record = receive.recv()
            else:
                timed_out = True
    except EOFError:
        record = None
    finally:
        if record is None and process.is_alive():
            process.kill()
        process.join(10)
        receive.close()
    if record is not None:
        return record
    elapsed = round(time.perf_counter() - started, 2)
    failed = {"status": "failed", "duration_s": elapsed}
    try:
        base = _base(job)
    except Exception:  # noqa: BLE001
        base = {"spec": job.spec, "key": job.key, "targets": []}
    if timed_out:
        return {**base, **failed, "reason": "timeout", "error": f"no result within the timeout of {job.timeout:g} s"}
    code = process.exitcode
    signal = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with {code}"
    reason = "memory" if code is not None and code in (-9,) and job.memory else "crash"
    return {**base, **failed, "reason": reason, "error": f"the model's process {signal} without a result"
            + (f" (memory cap {job.memory / 2**30:.1f} GiB)" if reason == "memory" and job.memory else "")}


# -- the zoo ---------------------------------------------------------------------------------------------


def resolve_targets(targets: Sequence[str] | None) -> list[str]:
    """Release keys: the newest published release of every vendor by default, ``all``: every release."""
    from opaudit.auditing import default_targets
    from opaudit.matrix import load_database

    db = load_database()
    if not targets:
        return default_targets(db)
    keys: list[str] = []
    for t in targets:
        found = [e.key for e in db.entries] if t.strip().lower() == "all" else [db.find(t).key]
        keys.extend(k for k in found if k not in keys)
    return keys


def default_memory(jobs: int) -> int | None:
    """The address-space cap of one model's process: 80 % of the machine's memory shared by the jobs
    (a traced process maps ~1 GiB before its model), at least 4 GiB."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return max(4 * 2**30, int(0.8 * total / max(1, jobs)))


# What a library's model resolves with: the libraries whose versions and the resolver sources whose text a resolved
# spec of that library depends on (the specs, diffusers' defaults and fixes); an edit of diffusers' data leaves
# the transformers models' resolutions standing, and the other way round.
_RESOLVED_BY = {
    "hf": (("transformers",), ("specs.py",)),
    "diffusers": (("diffusers", "transformers"), ("specs.py", "diffusion.py", "diffusers_fixes.py")),
    "timm": (("timm",), ("specs.py",)),
}


def _resolutions(cache: Path | None, library: str) -> tuple[Path | None, dict[str, list[Any]]]:
    """The cache's table of resolved specs of one library's own models (``hf:llama?...``, ``diffusers:UNet2DModel``,
    ``timm:resnet50``: family, head, configuration hash, fixes) for that library's version and its resolver: such a
    spec resolves the same until one of them changes, and a rerun from the cache need not build 400 configurations
    (or fill 160 diffusers classes' defaults) again. The stamp reads the libraries' versions from their metadata, so
    that a rerun imports none of them, and the resolver's own sources, so that a changed resolver resolves anew."""
    if cache is None:
        return None, {}
    from importlib import metadata

    from opaudit.zoo.specs import fixes_version

    packages, sources = _RESOLVED_BY[library]
    versions = []
    for name in packages:
        try:
            versions.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}=none")
    here = Path(__file__).resolve().parent
    resolver = hashlib.sha256()
    for source in sources:
        resolver.update((here / source).read_bytes())
    stamp = f"{library}/{'/'.join(versions)}/{opaudit.__version__}/{fixes_version()}/{resolver.hexdigest()}"
    path = cache / f"specs-{library}-{hashlib.sha256(stamp.encode()).hexdigest()[:12]}.json"
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        table = {}
    return path, table if isinstance(table, dict) else {}


def _by_type(spec: str) -> bool:
    """A model of a library resolved from the library alone (not a file, not the hub cache):
    ``hf:<model_type>[:Head][?overrides]``, ``diffusers:<ClassName>[?overrides]``, ``timm:<name>[?overrides]``."""
    return re.fullmatch(r"(hf:[\w.-]+(:\w+)?|diffusers:\w+|timm:[\w.-]+)(\?.*)?", spec) is not None


def plan(specs: Sequence[str], *, targets: Sequence[str], train: bool, mode: str, device: str, timeout: float,
         memory: int | None, threads: int, cache: Path | None = None,
         shrink: bool = False) -> tuple[list[Job], dict[str, dict[str, Any]]]:
    """A Job per spec that resolves; a failed record for each that does not (a typo, a model type without
    a head): those are the zoo's results too."""
    from opaudit.zoo.specs import load_spec

    db_version = coverage_db_version()
    jobs: list[Job] = []
    bad: dict[str, dict[str, Any]] = {}
    tables = {library: _resolutions(cache, library) for library in _RESOLVED_BY}
    known = {library: len(table) for library, (_, table) in tables.items()}
    for spec in specs:
        table = tables[spec.partition(":")[0]][1] if _by_type(spec) else {}
        hit = table.get(spec)
        if isinstance(hit, list) and len(hit) == 5 and isinstance(hit[4], dict):
            family, head, kind, config_hash, fixes = hit
            key = job_key(spec, config_hash, targets=targets, train=train, mode=mode, device=device,
                          db_version=db_version, shrink=shrink)
            jobs.append(Job(spec, key, family, head, kind, config_hash, list(targets), train, mode, device, timeout,
                            memory, threads, fixes, shrink))
            continue
        try:
            named = load_spec(spec, build=False)
        except Exception as e:  # noqa: BLE001 - a spec that does not resolve is a result, not the zoo's end
            message = e.message + (f" ({e.hint})" if e.hint else "") if isinstance(e, OpauditError) \
                else describe_exception(e)
            bad[spec] = {"spec": spec, "key": None, "kind": spec.partition(":")[0] if ":" in spec else "file",
                         "family": "", "head": "", "config_hash": None, "config_fixes": {}, "cut": None,
                         "train": train,
                         "status": "failed",  # a library that does not import is its own reason
                         "reason": "package" if _reason(message, e) == "package" else "spec", "error": message,
                         "mode": None,
                         "mode_reason": None, "calls": 0, "ops": 0, "duration_s": 0.0, "targets": []}
            continue
        key = job_key(spec, named.config_hash, targets=targets, train=train, mode=mode, device=device,
                      db_version=db_version, shrink=shrink)
        jobs.append(Job(spec, key, named.family, named.head, named.kind, named.config_hash, list(targets), train,
                        mode, device, timeout, memory, threads, named.fixes, shrink))
        if _by_type(spec):
            table[spec] = [named.family, named.head, named.kind, named.config_hash, named.fixes]
    for library, (table_path, table) in tables.items():
        if table_path is not None and len(table) > known[library]:
            _store_file(table_path, json.dumps(table, sort_keys=True))
    return jobs, bad


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opaudit" / "zoo"


RESOURCE_REASONS = ("timeout", "memory")  # failures that depend on the limits a model ran under


def _no_larger(now: float | int | None, then: float | int | None) -> bool:
    """A limit (None: none) is no larger than the one a failure ran under."""
    return then is None or (now is not None and now <= then)


def _cached(cache: Path | None, job: Job) -> dict[str, Any] | None:
    if cache is None:
        return None
    path = cache / f"{job.key}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != job.key:
        return None
    limits = record.pop("limits", None) or {}  # kept in the cache only: a cached record reads as a fresh one
    if record.get("reason") in RESOURCE_REASONS:  # the same answer only under limits no larger than its own
        if not (_no_larger(job.timeout, limits.get("timeout", 0)) and _no_larger(job.memory, limits.get("memory", 0))):
            return None
    return record


def _store(cache: Path | None, record: dict[str, Any], job: Job | None) -> None:
    if cache is None or not record.get("key") or record.get("reason") == "crash":
        return
    if record.get("reason") in RESOURCE_REASONS:
        if job is None:
            return
        record = {**record, "limits": {"timeout": job.timeout, "memory": job.memory}}
    _store_file(cache / f"{record['key']}.json", json.dumps(record, sort_keys=True))


def _store_file(path: Path, text: str) -> None:
    from opaudit.files import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(path), text)
    except (OSError, OpauditError):
        pass  # a cache that cannot be written costs a rerun, nothing else


def run_zoo(specs: Sequence[str], *, targets: Sequence[str] | None = None, train: bool = True, mode: str = "auto",
            device: str = "cuda", jobs: int | None = None, timeout: float = DEFAULT_TIMEOUT,
            memory: int | None = None, cache: Path | None = None, executor: str = "local",
            address: str | None = None, on_start: Callable[[int, int], None] | None = None,
            on_result: Callable[[dict[str, Any]], None] | None = None,
            on_begin: Callable[[str], None] | None = None, shrink: bool = False) -> ZooResult:
    """Trace and audit every model of ``specs`` against ``targets``, ``jobs`` at a time, each in a process of
    its own. ``cache``: a folder of earlier records (None: no cache). ``on_start(cached, to_run)`` once
    the plan is made, ``on_begin(spec)`` as a model starts, ``on_result(record)`` as each model ends (cached
    ones first). ``shrink``: each configuration cut until the model runs for real (shrink.py)."""
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor {executor!r}", hint=f"one of {', '.join(EXECUTORS)}")
    if not specs:
        raise InputError("no model given", hint="opaudit zoo hf:llama hf:bert ..., --from FILE or --all hf")
    started = time.perf_counter()
    jobs = jobs or os.cpu_count() or 1
    keys = resolve_targets(targets)
    memory = default_memory(jobs) if memory is None else (memory or None)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    planned, bad = plan(list(dict.fromkeys(specs)), targets=keys, train=train, mode=mode, device=device,
                        timeout=timeout, memory=memory, threads=threads, cache=cache, shrink=shrink)
    done: dict[str, dict[str, Any]] = dict(bad)
    todo: list[Job] = []
    for job in planned:
        hit = _cached(cache, job)
        if hit is not None:
            done[job.spec] = hit
        else:
            todo.append(job)
    cached = len(done) - len(bad)
    if on_start is not None:
        on_start(len(done), len(todo))
    if on_result is not None:
        for record in done.values():
            on_result(record)

    by_spec = {job.spec: job for job in todo}

    def finished(record: dict[str, Any]) -> None:
        _store(cache, record, by_spec.get(record["spec"]))
        done[record["spec"]] = record
        if on_result is not None:
            on_result(record)

    if any(job.spec.startswith("timm:") for job in todo) and "opaudit.zoo._preload_timm" not in _PRELOAD:
        _PRELOAD.append("opaudit.zoo._preload_timm")  # timm's import, seconds, once (where no model ran yet)
    if todo:
        if executor == "ray":
            from opaudit.zoo.distributed import run_on_ray

            run_on_ray(todo, run_job, jobs=jobs, address=address, finished=finished)
        else:
            def begun(job: Job) -> dict[str, Any]:
                if on_begin is not None:
                    on_begin(job.spec)
                return run_job(job)

            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(begun, job) for job in todo]
                for f in as_completed(futures):
                    finished(f.result())
    records = [done[s] for s in dict.fromkeys(specs)]
    options = {"train": train, "mode": mode, "device": device, "jobs": jobs, "timeout": timeout, "memory": memory,
               "executor": executor, "shrink": shrink}
    return ZooResult(records, keys, train, cached, round(time.perf_counter() - started, 2), options)
