"""The GPU examples under examples/: each loads as a target (importing its sibling helper), names its candidates,
and on a machine without a CUDA GPU audits to `skip` rows that say why, never to errors, but for the Triton ones,
which run there in Triton's interpreter (docs/triton.md). They run for real on a GPU (reports/gpu/, docs/gpu.md)."""

import importlib.util
from pathlib import Path

import pytest

import softaudit
from softaudit.adapters._targets import load_target

torch = pytest.importorskip("torch")

EXAMPLES = Path(__file__).parent.parent / "examples"
CANDIDATES = {
    "triton_softmax.py": {"triton.fused_softmax": "softmax"},
    "triton_attention.py": {"triton.flash_forward": "attention"},
    "compiled_module.py": {
        "compiled.log_softmax": "log_softmax",
        "compiled.logsumexp": "logsumexp",
        "compiled.attention_block": "attention",
    },
    "cuda_softmax_op.py": {"cuda_op.warp_softmax": "softmax"},
}


@pytest.mark.parametrize("example", sorted(CANDIDATES))
def test_an_example_loads_with_its_candidates(example):
    found = {c.name: c.kind for c in load_target(str(EXAMPLES / example))}
    assert found == CANDIDATES[example]


#: The examples that run on a CPU too: framework="triton", in Triton's interpreter where no GPU is.
TRITON = ("triton_attention.py", "triton_softmax.py")
HAS_TRITON = importlib.util.find_spec("triton") is not None


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the examples run")
@pytest.mark.parametrize("example", sorted(set(CANDIDATES) - set(TRITON)))
def test_without_a_gpu_an_example_audits_to_skips_that_say_why(example, tmp_path):
    result = softaudit.audit(str(EXAMPLES / example), dtypes=["float16", "float64"], suite="quick", cache=False)
    table = result.table
    assert set(table.verdict) == {"skip"}, table[["candidate", "dtype", "verdict", "note"]].to_string()
    # (the attention families with score modifiers skip first on what the example does not take: softcap, ...)
    by_keyword = table.note.str.startswith("does not take")
    assert table[(table.dtype == "float16") & ~by_keyword].note.str.contains("needs a CUDA GPU").all()
    assert (table.dtype == "float16").sum() > by_keyword[table.dtype == "float16"].sum()


@pytest.mark.skipif(HAS_TRITON, reason="Triton is installed: the examples run")
@pytest.mark.parametrize("example", TRITON)
def test_without_triton_a_triton_example_skips_saying_so(example):
    table = softaudit.audit(str(EXAMPLES / example), dtypes=["float32"], suite="quick", cache=False).table
    assert set(table.verdict) == {"skip"}
    assert table[~table.note.str.startswith("does not take")].note.str.contains("needs Triton").all()


@pytest.mark.skipif(not HAS_TRITON, reason="needs Triton")
@pytest.mark.parametrize(
    ("example", "families"),
    [("triton_softmax.py", ["gaussian", "neg_inf"]), ("triton_attention.py", ["attn_gaussian", "attn_masks"])],
)
def test_a_triton_example_audits_on_a_cpu_in_the_interpreter_bfloat16_included(example, families):
    """In worker processes (the default isolation), which set nothing up before the example imports Triton."""
    table = softaudit.audit(
        str(EXAMPLES / example), dtypes=["bfloat16", "float32"], suite="quick", families=families, cache=False
    ).table
    assert set(table.verdict) == {"pass"}, table[["dtype", "family", "verdict", "note"]].to_string()
    assert table.note.str.contains("ran in Triton's interpreter").all()
