"""Units on a Dask distributed cluster (`softaudit run --scheduler tcp://HOST:PORT`): Dask's futures carry each
prepared family from the worker that made it to those that audit its units (computed once per kind x dtype x
family, moved only where needed), its resources route GPU candidates to workers that declare `GPU`, and its nannies
restart a worker that dies. Candidate calls go through each worker's own executor (softaudit.execute._serial.task),
so with isolation "worker" a candidate crash is an error row naming its cause, as in a serial run, on a cluster
started as Dask's docs show (daemonic workers under nannies: softaudit/execute/_isolated.py lets them start
the isolation process).
"""

from __future__ import annotations

from ..adapters import check_device
from ._serial import Serial, _whole, needs_gpu, task

INSTALL = "--scheduler needs Dask: pip install 'softaudit[dask]'"
GPU_WORKERS = "dask worker tcp://HOST:PORT --resources GPU=1"


class Dask(Serial):
    """Units on the workers of the Dask cluster at `scheduler` (an address, or a distributed.Client to use as it
    is). ValueError (one line): no Dask, or no scheduler there."""

    parallel = True
    share = None  # (prepared families travel as Dask data)

    def __init__(self, scheduler, isolation: str, memory_mib: int | None):
        try:
            import distributed
        except ImportError:
            raise ValueError(INSTALL) from None
        super().__init__(None)
        self.settings = (isolation, memory_mib)
        self._own = not isinstance(scheduler, distributed.Client)
        try:
            self.client = distributed.Client(scheduler, set_as_default=False) if self._own else scheduler
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
        self.width = max(1, sum(self.client.nthreads().values()))

    def submit(self, fn, *args, gpu: bool = False):
        """fn(*args, ex=...) on a worker (one with a GPU resource if gpu); its Dask future. A future among args
        stands for its result, which Dask moves to that worker."""
        return self.client.submit(task, fn, *self.settings, *args, resources={"GPU": 1} if gpu else None, pure=False)

    def submit_staged(self, fn, *args, gpu: bool = False):
        return self.submit(_whole, fn, *args, gpu=gpu)

    def cancel(self, futures: list) -> list:
        unfinished = [future for future in futures if not future.done()]
        self.client.cancel(unfinished)
        return unfinished

    def check(self, candidates: list) -> None:
        """ValueError (one line) when GPU candidates have no worker with a GPU resource to run on, or their
        framework sees no such device there (checked on such a worker)."""
        gpu = dict.fromkeys((c.framework, c.device) for c in candidates if needs_gpu(c))
        if not gpu:
            return
        workers = self.client.scheduler_info(n_workers=-1)["workers"].values()
        if not any(w.get("resources", {}).get("GPU") for w in workers):
            raise ValueError(f"no Dask worker declares a GPU for the GPU candidates: start one with `{GPU_WORKERS}`")
        for framework, device in gpu:
            self.client.submit(check_device, framework, device, resources={"GPU": 1}, pure=False).result()

    def close(self, killed: bool = False) -> None:
        if self._own:
            self.client.close()
