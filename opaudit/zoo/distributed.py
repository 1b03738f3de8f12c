"""The zoo's jobs as Ray tasks: the same :func:`opaudit.zoo.run.run_job` (a process of its own per model, with
its timeout and memory cap) on a local Ray instance or a cluster (``address``). Ray schedules; opaudit only
submits and collects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from opaudit.errors import InputError

if TYPE_CHECKING:
    from opaudit.zoo.run import Job


def run_on_ray(todo: Sequence[Job], run_job: Callable[[Job], dict[str, Any]], *, jobs: int, address: str | None,
               finished: Callable[[dict[str, Any]], None]) -> None:
    """Run every job as a Ray task of one CPU. Without ``address`` a local instance of ``jobs`` CPUs is started
    (and stopped); with one (``ray://host:10001``, ``auto``) the cluster's CPUs take the tasks, and every node
    needs opaudit, torch and the models' libraries installed. A Ray already initialised in this process is used
    as it is. ``run_job`` runs one job (opaudit.zoo.run.run_job)."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray installed", hint="pip install 'opaudit[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
        except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError ...
            raise InputError(f"Ray could not start{f' or reach {address}' if address else ''}: {e}",
                             hint="check the address (ray://HOST:10001, or auto on a cluster node)") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_job)
        pending = [remote.remote(job) for job in todo]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                finished(ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()
