"""The hunt's terminal shows a mask by the positions each row keeps: the one kept key that matters is visible."""

import numpy as np

from softaudit.hunt import Finding
from softaudit.hunt._show import describe


def finding(mask) -> str:
    x = np.zeros(mask.shape, np.float32)
    return describe(Finding("k", "masked_softmax", "float32", 1, True, "why", 1.0, 0.1, None, {"x": x}, mask))


def test_a_single_kept_key_past_the_first_values_is_shown():
    """Was `[0, 0, 0, 0, 0, 0, ... (11 more)]`: the kept key 13 never appeared."""
    mask = np.zeros((1, 17), bool)
    mask[0, 13] = True
    assert "keeps 13 of 0..16" in finding(mask)


def test_rows_with_the_same_pattern_are_shown_together_with_the_masked_run():
    mask = np.ones((8, 40), bool)
    mask[::2, :16] = False
    text = finding(mask)
    assert "rows 0, 2, 4, 6: masks 0..15 of 0..39, keeps the other 24" in text, text
    assert "rows 1, 3, 5, 7: keeps all 40" in text, text


def test_a_row_that_keeps_nothing_says_so():
    mask = np.ones((2, 5), bool)
    mask[1] = False
    assert "row 1: keeps none of 5" in finding(mask)
