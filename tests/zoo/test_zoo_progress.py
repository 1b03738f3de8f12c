"""The zoo's progress bar on stderr: models done of all, failed, cached, elapsed, a line per job naming its model;
nothing with -q or where stderr is not a terminal."""

from __future__ import annotations

import io
import re

from helpers import run_cli
from rich.console import Console

from opaudit.cli.zoo import ZooProgress


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=160, emoji=False), buf


def test_the_bar_counts_models_failures_and_the_cache_and_names_each_job_s_model():
    console, buf = _console()
    with ZooProgress(3, disable=False, console=console) as bar:
        bar.started(cached=1, to_run=2)
        bar.ended({"spec": "hf:bert", "status": "ok"})  # the cached one
        bar.begun("hf:llama:CausalLM?num_hidden_layers=1")
        bar.begun("hf:gpt2")
        jobs = [t.description.strip() for t in bar.bar.tasks if t.visible and t.id != bar.task]
        assert jobs == ["hf:llama:CausalLM?num_hidden_layers=1", "hf:gpt2"]
        bar.ended({"spec": "hf:gpt2", "status": "failed"})
        bar.bar.refresh()
        main = bar.bar.tasks[bar.task]
        assert (main.completed, main.total, main.fields["counts"]) == (2, 3, "1 failed, 1 cached")
        assert [t.description.strip() for t in bar.bar.tasks if t.visible and t.id != bar.task] == \
            ["hf:llama:CausalLM?num_hidden_layers=1"]
        bar.begun("hf:t5")  # a job's line is reused for its next model
        assert len(bar.bar.tasks) == 3
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())  # the terminal's control codes out
    assert "1 failed, 1 cached" in text and "hf:llama:CausalLM" in text  # no emoji for :llama:


def test_quiet_and_a_pipe_show_nothing(tmp_path):
    console, buf = _console()
    with ZooProgress(1, disable=True, console=console) as bar:
        bar.begun("hf:bert")
        bar.ended({"spec": "hf:bert", "status": "ok"})
    assert buf.getvalue() == ""
    # through a pipe, no -q: the zoo runs (a misspelt model, failed at once) and stderr holds no bar
    code, _, stderr = run_cli("zoo", "hf:lama", "--no-cache", "--out", str(tmp_path / "zoo"))
    assert code == 3 and "every model failed" in stderr and "\u2501" not in stderr and "0/1" not in stderr, stderr
