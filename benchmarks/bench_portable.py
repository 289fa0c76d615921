"""Speed of the built-ins' portable arithmetic against numpy's own (ratios measured in one run; not a test).

    python benchmarks/bench_portable.py

The built-ins compute exp, log and matrix products from IEEE basic operations (softaudit/_libm.py,
_ops.matmul) so that they give the same bits on every CPU; this prints what that costs against numpy's
SIMD-dispatched ufuncs and BLAS on the same inputs.
"""

from __future__ import annotations

import operator
from functools import partial

import numpy as np
from bench_audit import best_of  # (run as a script: benchmarks/ is on the path)

from softaudit.candidates import _ops


def main() -> None:
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        x = (rng.standard_normal(1 << 20) * 10).astype(dtype)
        positive = np.abs(x) + dtype(1e-3)
        for name, ours, theirs in (
            ("exp", partial(_ops.exp, x), partial(np.exp, x)),
            ("log", partial(_ops.log, positive), partial(np.log, positive)),
        ):
            a, b = best_of(ours, 5), best_of(theirs, 5)
            print(
                f"{name:6s} {np.dtype(dtype).name:8s} 2**20 values: portable {a * 1e3:7.2f} ms, "
                f"numpy {b * 1e3:6.2f} ms, ratio {a / b:5.1f}x"
            )
        p, v = rng.standard_normal((8, 128, 512)).astype(dtype), rng.standard_normal((8, 512, 64)).astype(dtype)
        a, b = best_of(partial(_ops.matmul, p, v, dtype), 5), best_of(partial(operator.matmul, p, v), 5)
        print(
            f"matmul {np.dtype(dtype).name:8s} (8, 128, 512) @ (8, 512, 64): portable {a * 1e3:7.2f} ms, BLAS "
            f"{b * 1e3:6.2f} ms, ratio {a / b:5.1f}x"
        )


if __name__ == "__main__":
    main()
