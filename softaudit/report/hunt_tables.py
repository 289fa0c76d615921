"""hunt.csv and hunt.md: one row per candidate x dtype hunted, what the search found and where it was saved."""

from __future__ import annotations


def hunt_table(findings) -> object:
    """pandas.DataFrame, one row per Finding: examples tried, FAIL, ERROR (the search stopped on an error judging an
    input) or none, the error, the shrunk input's size, the keywords it was called with (attention's modifiers,
    cross-entropy's options; "" for none), the reason and the corpus file it went to."""
    import numpy as np
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "candidate": f.candidate,
                "dtype": f.dtype,
                "examples": f.examples,
                "found": "FAIL" if f.failed else "ERROR" if f.stopped else "none",
                "max_cond_err": f.max_cond_err,
                "seconds": round(f.seconds, 2),
                "shrunk_size": 0 if not f.inputs else int(sum(np.size(a) for a in f.inputs.values())),
                "options": f.called_with,
                "reason": f.reason,
                "corpus": f.corpus_file or "",
            }
            for f in findings
        ]
    )


def hunt_csv(findings, comparison=None) -> str:
    """The table as CSV (a hunt has no baseline: comparison is always None)."""
    return hunt_table(findings).to_csv(index=False)


def hunt_md(findings, comparison=None) -> str:
    """The table in Markdown (a hunt has no baseline: comparison is always None)."""
    table = hunt_table(findings)
    header = "| " + " | ".join(table.columns) + " |\n|" + "---|" * len(table.columns) + "\n"
    body = "".join("| " + " | ".join(_cell(v) for v in row) + " |\n" for row in table.itertuples(index=False))
    stopped = "**Interrupted: the searches below finished before Ctrl-C or SIGTERM; the rest did not run.**\n\n"
    return "# softaudit hunt\n\n" + (stopped if getattr(findings, "interrupted", False) else "") + header + body


def _cell(value) -> str:
    """A Markdown cell: "-" for a value not measured (NaN), a pipe escaped."""
    return "-" if isinstance(value, float) and value != value else str(value).replace("|", "\\|")
