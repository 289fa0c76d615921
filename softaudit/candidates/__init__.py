"""Built-in candidates: the implementations people write, each with its known weakness in its docstring.

Each is a plain numpy function of the audited dtype, marked with @softaudit.candidate, so `softaudit.candidates`
is itself a target. Every built-in gives the same bits on every x86-64 CPU: its exp, log, sums and matrix products
come from `_ops`, built from IEEE basic operations, never from numpy's CPU-dispatched ufuncs or from BLAS.

Per kind, built-ins serve as comparisons in verdicts: PLAIN, the implementation a kernel engineer writes in the
low precision without upcasting (FlashAttention's tests compare against exactly such a reference), with the other
STANDARD same-dtype algorithms beside it, and BEST, the best practice (computed in float32 for 16-bit dtypes and
rounded once, in the dtype itself otherwise). Each kind names its own (softaudit.kinds); these tables read them.
"""

from ..adapters import Candidate, load_target
from ..kinds import KINDS
from . import (
    attention,
    attention_grad,
    attention_lse,
    attention_sinks_grad,
    cross_entropy,
    cross_entropy_grad,
    linear_cross_entropy,
    linear_cross_entropy_grad,
    log_softmax,
    log_softmax_grad,
    logsumexp,
    logsumexp_grad,
    masked_softmax,
    masked_softmax_grad,
    merge_attention,
    softmax,
    softmax_grad,
)
from .attention import tiled_attention as tiled_attention
from .softmax import online_softmax as online_softmax

#: The plain same-dtype implementation per kind: every step rounded to the audited dtype, no upcast.
PLAIN = {k.name: k.plain for k in KINDS.values()}

#: The standard same-dtype algorithms per kind, the plain one first: every one rounds each step to the audited
#: dtype, and each is a textbook method (max shift; sums pairwise, as a tree reduction, or one term at a time, as
#: a loop and numpy's bfloat16 sum; online, Milakov & Gimelshein 2018; exp2 as fused GPU kernels
#: compute exp; division-free exp(x - lse); log1p, Blanchard, Higham & Higham 2021; FlashAttention's P in the
#: dtype). A fail is an accuracy worse than `factor` x the worst of them: beyond what computing in the dtype costs.
STANDARD = {k.name: k.standard for k in KINDS.values()}

#: The best-practice built-in per kind: computed in float32 for 16-bit dtypes, in the dtype itself otherwise.
BEST = {k.name: k.best for k in KINDS.values()}

#: Best practice in another summation order per kind, which widens best practice in float32 and float64
#: (Kind.practice).
PRACTICE = {k.name: k.practice for k in KINDS.values()}


def builtins() -> list[Candidate]:
    """Every built-in candidate, kind by kind, in definition order."""
    modules = (
        softmax,
        log_softmax,
        logsumexp,
        masked_softmax,
        attention,
        attention_lse,
        cross_entropy,
        linear_cross_entropy,
        merge_attention,
        softmax_grad,
        log_softmax_grad,
        logsumexp_grad,
        masked_softmax_grad,
        attention_grad,
        attention_sinks_grad,
        cross_entropy_grad,
        linear_cross_entropy_grad,
    )
    return [c for module in modules for c in load_target(module.__name__)]


#: Built-in modules left out of `builtins()` (the main job), whose comparisons `_named` finds too: FP8 attention's
#: (docs/fp8.md: audited as `softaudit run softaudit.candidates.attention_fp8`).
#: Loaded on first use: its kernels import the reference, which a worker process calling another kind's candidate
#: does without.
APART = (f"{__name__}.attention_fp8", f"{__name__}.quantize_fp8")


def apart() -> list[Candidate]:
    """The built-in candidates of the modules left out of `builtins()` (APART), module by module."""
    return [c for module in APART for c in load_target(module)]


def _named(name: str) -> Candidate:
    found = [c for c in builtins() if c.name == name] or [c for c in apart() if c.name == name]
    return found[0]


def plain(kind: str) -> Candidate:
    """The plain comparison for `kind`: what a kernel written in the audited dtype, without upcasting, gives."""
    return _named(PLAIN[kind])


def standard(kind: str) -> list[Candidate]:
    """The standard same-dtype algorithms for `kind` (STANDARD), the plain one first."""
    return [_named(name) for name in STANDARD[kind]]


def practice(kind: str) -> list[Candidate]:
    """The built-ins that are best practice too where best practice computes in the dtype itself (PRACTICE)."""
    return [_named(name) for name in PRACTICE[kind]]


def best(kind: str) -> Candidate:
    """The best-practice comparison for `kind`: float32 arithmetic for 16-bit dtypes, rounded once."""
    return _named(BEST[kind])


__all__ = [
    "APART",
    "BEST",
    "PLAIN",
    "PRACTICE",
    "STANDARD",
    "apart",
    "best",
    "builtins",
    "online_softmax",
    "plain",
    "practice",
    "standard",
    "tiled_attention",
]
