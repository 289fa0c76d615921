"""Candidates run with one BLAS / OpenMP thread, wherever they run, so that a table never depends on how many
threads a machine, a Dask nanny or the environment gives numpy's BLAS or torch.

A multi-threaded BLAS splits a product differently for each thread count, and so rounds it differently: a serial
audit (OpenBLAS on 2 threads) and a Dask one (the nanny sets OPENBLAS_NUM_THREADS=1) gave 44 different cells, and
the gate read 3.22e4 -> 1.22e5 ulp as a regression. Worker processes start with `ONE_THREAD` in their environment
(read by OpenBLAS, MKL, BLIS and OpenMP when they load, torch's intra-op pool included); a call in softaudit's own
process (`--isolation none`) runs inside `one_thread()`, which sets the same limits and restores them after.
JAX's XLA thread pool is sized when JAX starts and is not pinned (docs/isolation.md).
"""

from __future__ import annotations

import contextlib
import sys

#: The environment of every worker process softaudit starts.
ONE_THREAD = {
    name: "1"
    for name in (
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "BLIS_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
    )
}

_controller: list = []  # (len(sys.modules) when made, threadpoolctl's controller): made again after new imports


@contextlib.contextmanager
def one_thread():
    """This process's BLAS and OpenMP libraries, and torch's intra-op pool where torch is loaded, at one thread for
    the block; what they had is restored after."""
    from threadpoolctl import ThreadpoolController

    if not _controller or _controller[0][0] != len(sys.modules):  # (a candidate may have loaded a library)
        _controller[:] = [(len(sys.modules), ThreadpoolController())]
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None and hasattr(torch, "get_num_threads") else None
    with _controller[0][1].limit(limits=1):
        if threads is not None and threads != 1:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            if threads is not None and threads != 1:
                torch.set_num_threads(threads)
