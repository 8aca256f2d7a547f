"""Measuring candidates as Ray tasks (``pip install polyonnx[ray]``): tuning spread over the
nodes of a cluster, each job on a node whose target fingerprint matches the one being tuned.

Each job is :func:`polyonnx.tune.runner.measure_job` run as a Ray task with no retries, one per
CPU (or per tuned thread): a candidate that crashes kills its Ray worker, which Ray reports
and replaces; when no job finishes for ``timeout`` seconds, those still running are
cancelled (their workers killed). A node of
another target refuses the job (the fingerprint travels with it), so a mixed cluster never
stores one machine's times as another's. ``"auto"`` starts a local Ray instance (and stops it
at the end); any other address joins that cluster.

Example::

    runner = RayRunner("auto", timeout=60)
    results = runner.run(jobs)
    runner.close()
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from polyonnx.errors import TuningError
from polyonnx.tune.runner import Job, Result, measure_job


def _measure_remote(measure: Callable[[Job], Result], job: Job) -> Result:
    """A job in a Ray worker; its result travels back without the job (the caller has it)."""
    return dataclasses.replace(measure(job), job=None)


class RayRunner:
    """Jobs as Ray tasks on the cluster at ``address`` (``"auto"``: a new local instance),
    ``cpus_per_job`` CPUs each; ``measure`` is what a task runs (:func:`measure_job`)."""

    def __init__(
        self,
        address: str = "auto",
        timeout: float = 120.0,
        cpus_per_job: int = 1,
        measure: Callable[[Job], Result] = measure_job,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise TuningError(
                "measuring with Ray needs the ray package: pip install polyonnx[ray]"
            ) from None
        self._ray = ray
        self.timeout = timeout
        self._started = False
        if not ray.is_initialized():
            # The workers import polyonnx as this process does (a source checkout included).
            env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
            try:
                ray.init(
                    address=None if address == "auto" else address,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    runtime_env={"env_vars": env} if env else None,
                )
            except Exception as e:  # (Ray raises ConnectionError, RuntimeError, ...)
                raise TuningError(f"cannot start or join Ray at {address!r}: {e}") from None
            self._started = True
        self._task = ray.remote(num_cpus=cpus_per_job, max_retries=0)(_measure_remote)
        self.measure = measure

    def run(self, jobs: Sequence[Job]) -> list[Result]:
        ray = self._ray
        refs = [self._task.remote(self.measure, job) for job in jobs]
        pending, done = list(refs), set()
        while pending:  # the jobs run side by side: each finishing one restarts the clock
            ready, pending = ray.wait(pending, num_returns=1, timeout=self.timeout)
            if not ready:
                break
            done.update(ready)
        results = []
        for job, ref in zip(jobs, refs, strict=True):
            if ref not in done:
                ray.cancel(ref, force=True)
                results.append(Result(job, error=f"timed out after {self.timeout:g} s"))
                continue
            try:
                got: Any = ray.get(ref)
                results.append(dataclasses.replace(got, job=job))
            except ray.exceptions.RayError as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                results.append(Result(job, error=f"the Ray worker crashed: {first}"))
        return results

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False
