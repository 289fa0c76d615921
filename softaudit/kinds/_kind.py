"""The Kind: everything softaudit knows about one kind of function, in one frozen object."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping


@dataclasses.dataclass(frozen=True)
class Kind:
    """What a kind is: how it is called, what it returns, its exact answer, its comparisons, families and measures.

    The loop asks the kind instead of branching on its name. Attributes are data where data says it; the parts
    that are code and belong to the kind (its reference, what its measures need, the inputs behind an element, its
    upstream gradient) are functions, imported for real by the registry. The layers above keep their own tables of
    what they need of a kind: the causes' diagnosis and the hunt's strategies, chosen by the kind's shape
    (softaudit/causes.py, softaudit/hunt/_strategies.py), and the rounding budgets, a formula per kind by name
    (softaudit/budget.py); a kind missing from a table goes without.
    """

    name: str
    #: The numpy calling convention as people read it, "f(x, axis=-1)" (docs, errors).
    convention: str
    #: The positional arguments in order: names of a case's arrays, "mask" for the case's mask.
    arguments: tuple[str, ...]
    #: The keyword arguments: "axis" (passed as axis=-1) and "mask" (mask=the case's mask or None).
    keywords: tuple[str, ...]
    #: What the function returns, by name: one array for a forward kind, a tuple for several outputs.
    outputs: tuple[str, ...]
    #: The built-in comparisons (candidate names): the plain same-dtype one, the standard same-dtype algorithms
    #: (the plain one first) and best practice; `softaudit.candidates` documents each role.
    plain: str
    standard: tuple[str, ...]
    best: str
    #: Best practice in words, as a fix suggests it; {wide} stands for the wider type (softaudit.causes.wider:
    #: float32 for a 16-bit dtype, float64 for float32), and so in `fixes`.
    best_practice: str
    #: The built-in case families of the kind (softaudit.cases.FAMILIES names; run in registration order).
    families: tuple[str, ...]
    #: (kind, inputs, mask, dtype) -> one reference Result per output.
    reference: Callable
    #: (kind, inputs, mask, references) -> per output, what metrics.basis needs beyond the reference: the undefined
    #: rows and the conditioning scale (softaudit/conditioning.py), masked entries...
    conditioning: Callable
    #: (kind, prepared case, position) -> (inputs, mask) behind one output element.
    element_inputs: Callable
    #: The input and axis whose length is the length of the reduction behind each output (for the causes).
    reduction: tuple[str, int]
    #: Inputs x are rows x n, reduced along the last axis (case files are checked for that shape).
    row_wise: bool
    #: The output drops the reduced axis: one value per row.
    reduces: bool
    #: The outputs are logarithms (of probabilities or of a sum).
    logarithmic: bool
    #: The invariants checked with extra calls (softaudit/invariants.py), in the order they are reported.
    invariants: tuple[str, ...] = ()
    #: Masked keys' k and v are replaced and unaffected outputs must not move (the `mask_leak` column).
    leak_probe: bool = False
    #: The kind's own measures among the table's columns: negative, sum_err, argmax_flips, max_ulp_vsum, max_normwise.
    measures: tuple[str, ...] = ()
    #: The worst-element causes that apply beyond the common ones (softaudit/causes.py): absorbed, subnormal.
    causes: tuple[str, ...] = ()
    #: What the conditioning scale adds up, for the cancellation sentence ("": the generic sentence).
    scale_terms: str = ""
    #: What a mask leak is for this kind, in words.
    leak: str = "masked entries get probability"
    #: rule -> this kind's fix, where it differs from the common one (softaudit/causes.py).
    fixes: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)
    #: Gradient kinds: (kind, arrays, mask, rng) -> the upstream gradient g a family's case gets when the family
    #: does not give one (None: a forward kind).
    upstream: Callable | None = None
    #: The fail line's floor cap for this kind where it is lower than the policy's `max_floor` (None: the policy's):
    #: attention's conditioning scale holds u |s| for every score and u sum p|v|, so sound attention reads at most
    #: 3.5x the conditioning in float32 and float64, and a wrong constant 3-14x (docs/policy.md, "The floor").
    max_floor: float | None = None
    #: Built-ins that are best practice too in float32 and float64 (`softaudit.prepare.PRACTICE_BITS`), where best
    #: practice computes in the dtype itself (a wider type, double-double for float64, is beyond what kernels do):
    #: the same algorithm in another summation order, and a warn is past the worst of them and best practice.
    practice: tuple[str, ...] = ()
    #: Every input holds the batch items along its leading axes (the reproducibility reruns embed them in larger
    #: batches); False where an input leads with another axis (merge_attention's splits): no batch reruns.
    batched: bool = True
    #: (kind, prepared case, output) -> which neighbouring convention the output matches where the stated one's
    #: exact result is far ("" for none): attention's window, causal alignment, softcap, sinks, ALiBi slopes.
    conventions: Callable | None = None
    #: Inputs that are integer arrays (class labels): kept as int64, never rounded to the audited dtype.
    integers: tuple[str, ...] = ()
    #: The arrays a case may pass beside the arguments, by name, each with its number of axes per batch item (the
    #: others broadcast against the batch): attention's bias (Lq, Lk), ALiBi's slopes and the sinks (one per head).
    extras: Mapping[str, int] = dataclasses.field(default_factory=dict, hash=False)
    #: The kind's own case families, name -> (description, make): softaudit.cases registers them after its own
    #: (make(kind, fmt, size, rng) -> list of (arrays, mask, description[, params[, options]]), as there).
    makers: Mapping[str, tuple[str, Callable]] = dataclasses.field(default_factory=dict, hash=False)
    #: The conventions a candidate may declare it implements (`Candidate.conventions`), name -> (what it sets, in
    #: words, and its values, the default first: what a case's options state and the exact reference computes).
    declarable: Mapping[str, tuple[str, tuple[str, ...]]] = dataclasses.field(default_factory=dict, hash=False)
    #: (inputs, mask, options, conventions) -> (mask, options): a case's exact problem under declared conventions
    #: that depart from the defaults, in the defaults' terms, exactly (attention: a top-left causal limit as a mask).
    declared: Callable | None = None
    #: Declarable conventions every case is judged under, whatever its options (attention_fp8's FP8 scheme): the
    #: others apply only to the cases whose options set them (a causal limit, a window).
    standing: tuple[str, ...] = ()
    #: Inputs kept in the dtype the case gives them, never rounded to the audited one (attention_fp8's FP8 q8, k8,
    #: v8 and their float32 descales): the audited dtype is then the output's.
    kept: tuple[str, ...] = ()
    #: The dtypes the kind is audited in (None: any); the others a run names are left out for it (attention_fp8:
    #: o's dtypes, bfloat16, float16 and float32).
    dtypes: tuple[str, ...] | None = None
    #: The output's dtype is the candidate's choice (an FP8 kernel's o): an output less precise than the audited
    #: dtype is a skip in that dtype, rather than cast to it and judged there.
    own_dtype: bool = False
    #: The fail line is the measured one (`Policy.fail_above`) in every dtype, float32's included: the standard
    #: algorithms have no proven rounding budget to draw it from (attention_fp8: P in FP8).
    measured: bool = False
    #: Outputs measured in a format of their own rather than the audited dtype, name -> dtype name (quantize_fp8's
    #: descale, float32 beside x8 in the audited FP8 format): the candidate's output is cast to it, its reference
    #: rounded to it, and its row judged in it (its `dtype` column stays the audited one).
    formats: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)
    #: Arrays a case may pass that a candidate receives only where it takes them by name, rather than being skipped:
    #: attention's FP8 KV cache (k8, v8 and their descales) beside k and v, its exact dequantized values, which the
    #: candidates that do not read the cache (and the comparisons, and the bug models) compute from.
    optional: tuple[str, ...] = ()
    #: Declarable conventions that are deliberate approximations (Cut Cross-Entropy's gradient filter), name ->
    #: (kind, inputs, options, value, dtype) -> the bound B of each output (arrays of its shape: what the declared
    #: approximation may cost there, from the exact problem). They apply to every case, never change its exact
    #: problem, and a row within u (scale + T) + B is a warn with its size (softaudit/approximations.py).
    approximations: Mapping[str, Callable] = dataclasses.field(default_factory=dict, hash=False)

    def declaration(self, conventions) -> tuple[tuple[str, str], ...]:
        """A candidate's declared conventions (a mapping name -> value, or its pairs; None for none) checked against
        what the kind lets it declare, as sorted (name, value) pairs; ValueError in one line otherwise."""
        if not conventions:
            return ()
        try:
            pairs = sorted(dict(conventions).items())
        except (TypeError, ValueError):
            raise ValueError(
                f"conventions is a dict of name -> value, as {{'causal': 'top_left'}}, got {conventions!r}"
            ) from None
        if not self.declarable:
            raise ValueError(f"{self.name} has no conventions to declare (got conventions={dict(pairs)!r})")
        for name, value in pairs:
            if name not in self.declarable:
                known = "; ".join(f"{n}: {' or '.join(v)}" for n, (_, v) in self.declarable.items())
                raise ValueError(f"unknown convention {name!r} for {self.name}; it declares {known}")
            if value not in self.declarable[name][1]:
                values = " or ".join(repr(v) for v in self.declarable[name][1])
                raise ValueError(f"convention {name}={value!r} for {self.name} is not one of {values}")
        return tuple(pairs)

    def applied(self, conventions, options) -> tuple[tuple[str, str], ...]:
        """The declared conventions a case with these options sets (its causal limit, its window): those it is
        judged against."""
        used = {n for n, v in options.items() if v is not None and v is not False}
        used |= set(self.standing) | set(self.approximations)
        return tuple((n, v) for n, v in self.declaration(conventions) if n in used)

    def departures(self, conventions, options) -> tuple[tuple[str, str], ...]:
        """The declared conventions a case with these options sets that are not the default: what changes its
        exact problem (`declared`)."""
        applied = self.applied(conventions, options)
        return tuple((n, v) for n, v in applied if v != self.declarable[n][1][0] and n not in self.approximations)

    def approximated(self, conventions) -> tuple[tuple[str, str], ...]:
        """The declared approximations (`approximations`) that depart from the default (none): (name, value)."""
        pairs = self.declaration(conventions)
        return tuple((n, v) for n, v in pairs if n in self.approximations and v != self.declarable[n][1][0])

    def problem(self, inputs, mask, options, conventions) -> tuple:
        """(mask, options): the exact problem of a case under the declared conventions, in the defaults' terms (the
        case's own mask and options where no declared convention departs from the default)."""
        options = dict(options)
        departing = self.departures(conventions, options)
        return (mask, options) if not departing else self.declared(inputs, mask, options, dict(departing))

    def judged_against(self, conventions, options: list) -> str:
        """The note of a row whose cases (their options) set a convention the candidate declared: "judged against
        its declared top-left causal alignment" ("" where none does)."""
        applied = dict.fromkeys(pair for o in options for pair in self.applied(conventions, o))
        applied = [(n, v) for n, v in applied if n not in self.approximations or v != self.declarable[n][1][0]]
        words = [f"{self._words(name, value)} {self.declarable[name][0]}" for name, value in applied]
        said = f"judged against its declared {' and '.join(words)}" if words else ""
        declared = dict(self.declaration(conventions))
        for name in (n for n in self.standing if n not in declared and options):
            default = self._words(name, self.declarable[name][1][0])
            said = "; ".join(filter(None, [f"no {self.declarable[name][0]} declared: judged against {default}", said]))
        return said

    def explains(self, conventions, standard, worst) -> str:
        """What the standing conventions a candidate is judged under explain of its row's error: "P in e4m3 with
        offset 8 explains 4.5 of 24.7" (the standard comparison's largest error against the candidate's, both
        against the conditioning); "" for a kind without standing conventions or a row with nothing measured."""
        if not self.standing or standard is None or worst is None or standard != standard or worst != worst:
            return ""
        declared = dict(self.declaration(conventions))
        name = self.standing[0]
        words = self._words(name, declared.get(name, self.declarable[name][1][0]))
        return f"{words} explains {min(standard, worst):.3g} of {worst:.3g} x the conditioning"

    def _words(self, name: str, value: str) -> str:
        """A declared convention's value in words: its values' own words where they have them (an FP8 scheme's
        "P in e4m3 with offset 8"), else the value itself ("top-left")."""
        values = self.declarable[name][1]
        return values.words(value) if hasattr(values, "words") else value.replace("_", "-")

    def output_dtype(self, index: int, dtype):
        """The dtype output `index` is measured in: its own format (`formats`), else the audited `dtype`."""
        own = self.formats.get(self.outputs[index])
        return dtype if own is None else own

    @property
    def inputs(self) -> tuple[str, ...]:
        """The names of a case's arrays, in calling order."""
        return tuple(a for a in self.arguments if a != "mask")

    @property
    def masked(self) -> bool:
        """Takes a mask: the fully masked rule applies."""
        return "mask" in self.arguments or "mask" in self.keywords

    @property
    def mask_required(self) -> bool:
        """The mask is a positional argument: a case without one gets a mask that keeps everything."""
        return "mask" in self.arguments

    def call_arguments(self, arrays: Mapping, mask) -> tuple[tuple, dict]:
        """(args, kwargs) of a call on a case's arrays and mask, by the calling convention."""
        args = tuple(mask if name == "mask" else arrays[name] for name in self.arguments)
        kwargs = {name: -1 if name == "axis" else mask for name in self.keywords}
        # a case's further arrays (attention's bias, alibi_slopes, sinks) go by name
        kwargs |= {name: a for name, a in arrays.items() if name not in self.arguments}
        return args, kwargs
