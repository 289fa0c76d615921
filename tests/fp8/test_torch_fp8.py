"""torch's FP8 paths on a CPU (softaudit.frameworks.torch_fp8) under softaudit.fp8's audits."""

import numpy as np
import pytest

pytest.importorskip("torch")

from softaudit import fp8
from softaudit.candidates import quantize_fp8 as steps
from softaudit.frameworks import torch_fp8


def test_scaled_mm_attention_passes_under_its_declared_scheme_and_fails_as_p_in_bfloat16():
    families = ["fp8_heads", "fp8_repeated", "fp8_masks"]
    table = fp8.audit_attention_fp8(torch_fp8.attention, families=families)
    assert list(table.scheme) == ["P in e4m3 with offset 8"] * 3 and set(table.verdict) == {"pass"}
    wrong = fp8.audit_attention_fp8(torch_fp8.attention, scheme="p_bf16", families=families)
    assert set(wrong.verdict) == {"fail"}


def test_the_torch_quantize_step_is_sound():
    table = fp8.audit_quantize_fp8(torch_fp8.quantize)
    assert "fail" not in set(table.verdict) and table.x8_off_more.sum() == 0
    # (a warn only for a descale a step or two off: torch's float / tensor divides by multiplying the reciprocal)
    assert (table[table.verdict == "warn"].descale_steps <= 2).all()


def test_a_descale_a_few_steps_off_warns_and_a_swapped_one_fails():
    def nudged(x, fmt, granularity):
        x8, descale = steps.textbook(x, fmt, granularity)
        return x8, (np.asarray(descale, np.float32).view(np.int32) + 3).view(np.float32)

    def swapped(x, fmt, granularity):
        x8, descale = steps.textbook(x, fmt, granularity)
        with np.errstate(over="ignore"):
            return x8, np.float32(1) / np.asarray(descale, np.float32)

    assert set(fp8.audit_quantize_fp8(nudged).verdict) == {"warn"}
    table = fp8.audit_quantize_fp8(swapped)
    assert set(table[~table.case.str.contains("every value zero")].verdict) == {"fail"}
