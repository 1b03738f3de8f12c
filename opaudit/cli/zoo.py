"""``opaudit zoo``: many models against every target, each in a process of its own."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from opaudit.cli.console import err, out, print_lines, user_errors
from opaudit.cli.options import Device, Mode, ModelDevice, TraceMode, Train
from opaudit.errors import OpauditError, UserCodeError


class ZooProgress:
    """The zoo's progress on stderr: models done of all, failed, cached, the time elapsed, and a line per job
    naming the model it runs (rich.progress; nothing at all when disabled)."""

    def __init__(self, total: int, *, disable: bool, console: Any = None):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        # markup off: a spec is text (hf:llama:CausalLM is no emoji, a [ no style)
        self.bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[counts]}", markup=False), TimeElapsedColumn(),
                            console=console or err, transient=True, disable=disable)
        self.task = self.bar.add_task("zoo", total=total, counts="")
        self.failed = self.cached = 0
        self.running: dict[str, Any] = {}  # spec -> its job's line
        self.idle: list[Any] = []  # lines of jobs between two models

    def __enter__(self) -> ZooProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def _counts(self) -> None:
        self.bar.update(self.task, counts=f"{self.failed} failed, {self.cached} cached")

    def started(self, cached: int, to_run: int) -> None:
        self.cached = cached
        self._counts()

    def begun(self, spec: str) -> None:
        label = spec if len(spec) <= 60 else spec[:57] + "..."
        line = self.idle.pop() if self.idle else self.bar.add_task("", total=None, counts="")
        self.bar.update(line, description=f"  {label}", visible=True)
        self.bar.reset(line, total=None, description=f"  {label}", counts="")
        self.running[spec] = line

    def ended(self, record: dict[str, Any]) -> None:
        if record["status"] != "ok":
            self.failed += 1
        line = self.running.pop(record["spec"], None)
        if line is not None:
            self.bar.update(line, visible=False)
            self.idle.append(line)
        self.bar.update(self.task, advance=1)
        self._counts()


class Executor(str, Enum):
    local = "local"
    ray = "ray"


def zoo(
    specs: Annotated[list[str] | None, typer.Argument(help="Models: hf:<model_type>[:Head][?field=value&...], "
                                                      "hf:<path>, hf:<org>/<name>, diffusers:<ClassName>, "
                                                      "model.py[:factory].")] = None,
    from_file: Annotated[Path | None, typer.Option("--from", help="Read specs from this file, one a line "
                                                   "(# comments).")] = None,
    all_of: Annotated[str | None, typer.Option("--all", metavar="LIBRARY", help="Every model of a library: hf (every "
                                               "transformers model type with a task head), diffusers (every "
                                               "diffusers model class), timm (every timm architecture); default "
                                               "configurations.")] = None,
    shrink: Annotated[bool, typer.Option("--shrink", help="Cut each configuration until the model runs for real "
                                         "on the CUDA path, not on meta: one layer of each kind, widths to about "
                                         "128, fewer heads and experts, a smaller vocabulary; less where the "
                                         "configuration refuses. zoo.csv's cut column names the cut.")] = False,
    targets: Annotated[list[str] | None, typer.Option("--target", "-t", metavar="TARGET", help="Target to check "
                                                      "(repeatable): vendor, vendor@release, or 'all' (every "
                                                      "release). Default: the newest published release of every "
                                                      "vendor.")] = None,
    train: Train = False,
    mode: TraceMode = Mode.auto,
    device: ModelDevice = Device.cuda,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Models traced at once (default: the "
                                             "CPUs).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds a model may take before it is recorded "
                                           "as failed (timeout).")] = 600.0,
    memory: Annotated[float | None, typer.Option("--memory", min=0, help="GiB of address space per model's process "
                                                 "(default: 80% of the memory shared by the jobs, at least 4; 0: no "
                                                 "cap).")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for zoo.csv, zoo.json and zoo.html.")] = Path("zoo"),
    cache: Annotated[Path | None, typer.Option("--cache", help="Folder of cached results "
                                               "(default: ~/.cache/opaudit/zoo).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Trace every model again and cache nothing.")] = False,
    executor: Annotated[Executor, typer.Option("--executor", help="local: processes on this machine; ray: Ray tasks "
                                               "(pip install 'opaudit[ray]').")] = Executor.local,
    address: Annotated[str | None, typer.Option("--address", help="--executor ray: the cluster to use "
                                                "(ray://HOST:10001 or auto); default: a local Ray instance.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (there is none either where stderr "
                                        "is not a terminal).")] = False,
) -> None:
    """Every model of a zoo against every target, each model in a process of its own: zoo.csv, zoo.json,
    zoo.html."""
    from opaudit.zoo import report
    from opaudit.zoo.run import default_cache, run_zoo
    from opaudit.zoo.specs import all_specs, read_spec_file

    with user_errors():
        if address and executor != Executor.ray:
            raise OpauditError("--address needs --executor ray")
        names = [*(specs or []), *(read_spec_file(from_file) if from_file else []), *(all_specs(all_of) if all_of
                                                                                      else [])]
        if not names:
            raise OpauditError("no model given", hint="opaudit zoo hf:llama hf:bert ..., --from FILE or --all hf")
        report.check_outputs(out_dir)
        with ZooProgress(len(names), disable=quiet or not err.is_terminal) as bar:
            result = run_zoo(names, targets=targets, train=train, mode=mode.value, device=device.value, jobs=jobs,
                             timeout=timeout, memory=None if memory is None else int(memory * 2**30),
                             cache=None if no_cache else (cache or default_cache()), executor=executor.value,
                             address=address, on_start=bar.started, on_result=bar.ended, on_begin=bar.begun,
                             shrink=shrink)
        written = report.write_outputs(result, out_dir)
        print_lines(out, report.summary(result))
        err.print(f"written: {', '.join(str(p) for p in written)}", style="green")
        if result.records and len(result.failed) == len(result.records):  # nothing was traced: not a success
            raise UserCodeError(f"every model failed ({len(result.records)}): see the reasons above and in "
                                f"{out_dir or 'the zoo folder'}",
                                hint="opaudit scan SPEC shows one model's error in full")
