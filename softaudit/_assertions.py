"""assert_accurate: fail a user's test with a readable list of what failed, why, and the known fix."""

from __future__ import annotations


def assert_accurate(
    fn,
    *,
    kind: str,
    dtypes=("float16", "bfloat16", "float32"),
    suite: str = "quick",
    policy=None,
    families=None,
    **options,
) -> None:
    """Audit `fn` and raise AssertionError listing every row the policy fails (a fail or an error; with
    `Policy(strict=True)` a warn too): verdict, dtype, family, cause, what was measured and the fix.

    Options are those of softaudit.audit (cases=, timeout=, seed=...).
    """
    __tracebackhide__ = True  # pytest shows the assertion, not softaudit's frames
    from .runner import audit

    try:
        result = audit(fn, kind=kind, dtypes=dtypes, suite=suite, policy=policy, families=families, **options)
    except ValueError as exc:  # a mistake in the call (an unknown kind or dtype, a target that does not load...)
        raise exc.with_traceback(None) from None  # from here: the test's line and one message, as the CLI says it
    table, bad = result.table, result.failing
    if len(bad):
        lines = [f"{len(bad)} of {len(table)} audits did not pass for {kind} candidate {table.candidate[0]}:"]
        width = max(len(f) for f in bad.family)
        for row in bad.itertuples():
            cause = f" [{row.cause}]" if row.cause else ""
            lines.append(f"  {row.verdict:5s} {row.dtype:9s} {row.family:{width}s}{cause}  {row.note}")
            if row.fix:
                lines.append(f"        fix: {row.fix}")
        raise AssertionError("\n".join(lines))
