"""The case families several kinds run, by name (softaudit/cases registers them): the kind modules join them into
their `families`; a family one kind runs alone is named in that kind's module."""

#: The row families every row kind runs, in registration order (softaudit/cases/_rows.py).
ROWS = (
    "textbook",
    "gaussian",
    "offset",
    "wide_spread",
    "ties",
    "dominant",
    "long",
    "temperature",
    "subnormal",
    "neg_inf",
    "mnist_logits",
)
#: Rows with a NaN, a +inf logit or every entry -inf: run by every row kind, forward and gradient. The masked kinds
#: get them with every entry kept, and with the NaN and the +inf masked out (defined rows that must not see them;
#: softaudit/cases/_rows.py).
UNDEFINED = ("undefined",)
MASKED = ("padding", "causal", "random_mask", "fully_masked", "masked_extremes", "below_fill")
ATTENTION = ("attn_gaussian", "attn_shapes", "attn_long", "attn_large_activations", "attn_masks")
#: Families from reported bugs (softaudit/cases/_reported.py): the forward row kinds', and attention's. The row
#: gradient kinds do not run them (the main job's time); attention_grad runs attention's but one (its module).
REPORTED_ROWS = ("reported_vectors", "uniform_512", "equal_sum_overflow", "tile_edges", "mask_planes")
REPORTED_ATTENTION = (
    "attn_nan_masked_key",
    "attn_tile_edges",
    "attn_fp8_keys_128",
    "attn_causal_alignment",
    "attn_broadcast_kv",
    "attn_exact_probes",
)
#: Upstream gradients with a known structure, on Gaussian logits (softaudit/cases/_grad.py): the row gradient kinds'.
UPSTREAM = ("g_onehot", "g_cross_entropy", "g_constant", "g_wide")
