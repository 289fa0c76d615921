"""The mistake each defect and trade-off of the verdict corpus (tests/test_verdict_corpus.py) makes, as the name of
the bug model (softaudit.candidates.bugs) that is that mistake, written from each function's construction (its
code and docstring), not from what softaudit says of it. None: no model of that mistake exists yet, so the only
right answer is "unexplained".
"""

from . import attention, attention_grad, fp8, grads, log_softmax, masked, new_kinds, sinks_grad, softmax

MISTAKES = {
    # softmax
    softmax.float16_in_dtype: "in_dtype",
    softmax.float16_reciprocal: "in_dtype",
    softmax.exp_rounded_to_dtype: "exp_in_dtype",
    softmax.log2e_truncated: "short_log2e",
    softmax.ln2_truncated: "short_ln2",
    softmax.running_sum_in_dtype: "sum_in_dtype",
    softmax.bfloat16_numpy_sum: "sum_in_dtype",
    softmax.unshifted: "no_max_shift",
    softmax.float16_sum_overflow: "sum_in_dtype",
    softmax.schraudolph_exp: "approximate_exp",
    softmax.nan_to_num: "nan_hidden",
    softmax.online_no_rescale: "online_no_rescale",
    # log_softmax and logsumexp
    log_softmax.ls_no_log1p: "log_of_sum_near_1",
    log_softmax.ls_float16_in_dtype: "in_dtype",
    log_softmax.ls_log_of_softmax: "log_of_softmax",
    log_softmax.ls_unshifted: "no_max_shift",
    log_softmax.ls_ln2_truncated: "short_ln2",
    log_softmax.ls_float16_sum_overflow: "sum_in_dtype",
    log_softmax.lse_float16_in_dtype: "in_dtype",
    log_softmax.lse_unshifted: "no_max_shift",
    log_softmax.lse_online_no_rescale: "online_no_rescale",
    log_softmax.lse_running_sum_in_dtype: "sum_in_dtype",
    log_softmax.lse_missing_max: "max_not_added",
    # masked_softmax
    masked.where_float16_in_dtype: "in_dtype",
    masked.fill_neg1e4: "finite_fill",
    masked.mask_after_softmax: "mask_after_softmax",
    masked.sum_includes_masked: "mask_after_softmax",
    masked.finfo_min_fill: "finite_fill",
    masked.nan_to_num_masked: "nan_hidden",
    # attention
    attention.p_rounded_to_dtype: "p_in_dtype",
    attention.softmax_in_dtype: "in_dtype",
    attention.unscaled_scores: "unscaled_scores",
    attention.times_sqrt_d: "scaled_by_sqrt_d",
    attention.log2e_truncated: "short_log2e",
    attention.fill_neg1e4: "finite_fill",
    attention.tiled_unguarded_max: "unguarded_running_max",
    attention.online_no_rescale: "online_no_rescale_l",
    attention.mask_after_softmax: "mask_after_softmax",
    # the softmax gradients
    grads.sg_float16_in_dtype: "in_dtype",
    grads.sg_p_times_g: "missing_delta",
    grads.sg_sum_g_not_dot: "sum_g_for_dot",
    grads.sg_nan_to_num: "nan_hidden",
    grads.lsg_float16_in_dtype: "in_dtype",
    grads.lsg_missing_p: "mean_for_p_sum",
    grads.lsg_softmax_formula: "other_kinds_formula",
    grads.msg_float16_in_dtype: "in_dtype",
    grads.msg_no_mask_on_output: "finite_fill_unmasked_result",
    grads.msg_dot_over_all: "dot_over_all",
    grads.lseg_unnormalised: "p_not_normalised",
    grads.lseg_exp_x: "no_max_shift",
    # attention's gradients, cross-entropy, attention_lse, merges
    attention_grad.p_rounded_for_dv: "p_in_dtype",
    attention_grad.missing_delta: "missing_delta",
    attention_grad.dq_missing_scale: "dq_missing_scale",
    attention_grad.scale_sqrt_d: "grad_scaled_by_sqrt_d",
    attention_grad.softcap_derivative_dropped: "softcap_derivative_dropped",
    sinks_grad.sink_sign_flipped: "sink_gradient_sign",
    sinks_grad.sink_d_without_sink: "sink_left_out_of_d",
    new_kinds.ce_unshifted: "no_max_shift",
    new_kinds.ce_z_loss_when_off: "z_loss_when_off",
    new_kinds.ceg_p_in_dtype: "p_in_dtype",
    new_kinds.lce_logits_in_dtype: "logits_in_dtype",
    new_kinds.lceg_logits_in_dtype: "logits_in_dtype",
    new_kinds.ce_softcap_every_lane: "masked_lanes_made_finite",
    new_kinds.ceg_softcap_every_lane: "masked_lanes_made_finite",
    new_kinds.lse_plus_inf_for_no_key: "lse_of_no_key",
    new_kinds.merge_unguarded: "unguarded_merge",
    # the FP8 kinds
    fp8.fp8_attention_descale_v_dropped: "dropped_descale",
    fp8.quantize_amax_of_last_token: "amax_too_small",
}
