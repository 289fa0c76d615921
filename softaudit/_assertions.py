"""assert_accurate: fail a user's test with a readable table of what failed."""

from __future__ import annotations


def assert_accurate(fn, *, kind: str, dtypes=("float16", "bfloat16", "float32"), suite: str = "quick", policy=None,
                    families=None, **options) -> None:  # fmt: skip
    """Audit `fn` and raise AssertionError listing every row that did not pass (verdict, dtype, family, why).

    Options are those of softaudit.audit (cases=, timeout=, seed=...).
    """
    from .runner import audit

    result = audit(fn, kind=kind, dtypes=dtypes, suite=suite, policy=policy, families=families, **options)
    bad = result.table[result.table.verdict.isin(["fail", "error"])]
    if len(bad):
        lines = [f"{len(bad)} of {len(result.table)} audits did not pass for {kind} candidate {result.table.candidate[0]}:"]
        width = max(len(f) for f in bad.family)
        for row in bad.itertuples():
            lines.append(f"  {row.verdict:5s} {row.dtype:9s} {row.family:{width}s}  max {row.max_ulp:.3g} ulp  {row.note}")
        raise AssertionError("\n".join(lines))
