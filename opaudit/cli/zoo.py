"""``opaudit zoo``: many models against every target, each in a process of its own."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from opaudit.cli.console import err, out, print_lines, user_errors
from opaudit.cli.options import Device, Mode, ModelDevice, TraceMode, Train
from opaudit.errors import OpauditError, UserCodeError


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
                                               "transformers model type with a task head, default "
                                               "configuration).")] = None,
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
) -> None:
    """Every model of a zoo against every target, each model in a process of its own: zoo.csv, zoo.json,
    zoo.html."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[last]}"), console=err, transient=True) as bar:
            task = bar.add_task("zoo", total=len(names), last="")

            def started(cached: int, to_run: int) -> None:
                bar.update(task, description=f"zoo ({cached} cached)" if cached else "zoo")

            def ended(record: dict) -> None:
                mark = "ok" if record["status"] == "ok" else f"failed: {record.get('reason')}"
                bar.update(task, advance=1, last=f"{record['spec'][:40]} {mark}")

            result = run_zoo(names, targets=targets, train=train, mode=mode.value, device=device.value, jobs=jobs,
                             timeout=timeout, memory=None if memory is None else int(memory * 2**30),
                             cache=None if no_cache else (cache or default_cache()), executor=executor.value,
                             address=address, on_start=started, on_result=ended)
        written = report.write_outputs(result, out_dir)
        print_lines(out, report.summary(result))
        err.print(f"written: {', '.join(str(p) for p in written)}", style="green")
        if result.records and len(result.failed) == len(result.records):  # nothing was traced: not a success
            raise UserCodeError(f"every model failed ({len(result.records)}): see the reasons above and in "
                                f"{out_dir or 'the zoo folder'}",
                                hint="opaudit scan SPEC shows one model's error in full")
