"""Prepare: a family's cases with their inputs rounded to the audited dtype (this IS the input), their exact results,
and the comparison implementations' errors on them, computed once per kind x dtype x family and shared by every
candidate of the kind.

The comparisons (the plain implementation in the dtype, the other standard same-dtype algorithms, best practice)
set the verdict's bounds; their calls go through the executor as the candidates' do. A prepared built-in family
is kept between audits: in this process (`CACHE_BYTES`) and in a folder for later processes and for worker
processes (softaudit/_store.py); the families are deterministic, so the same kind, dtype, suite and seed reuse it.
In the folder a case keeps what the measures cannot derive cheaply, its reference packed (softaudit/_packed.py:
every bit, in the smallest of a few forms); a built-in case keeps its recipe and a digest of its rounded inputs, and
its family makes them again when the file is read (cheap against storing them: the inputs were most of a kept
family); the rest is derived when first read (ulps, masks, conditioning scales, the invariants' probes). What the
folder holds per input element is measured by benchmarks/bench_cache.py (docs/benchmarks.md).

(Longer than the house's 400 lines: a prepared case, a prepared family, its comparisons and the two caches are one
family's life (made, computed, kept, shared, read back).)
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import math
import os
import warnings
from pathlib import Path

import numpy as np

from . import _packed, _store, budget, invariants, kinds, reproducibility
from . import candidates as builtin
from ._threads import one_thread
from .adapters import Candidate, CandidateError, CandidateSkip
from .cases import FAMILIES, Case
from .execute import Executor, calls
from .kinds import Kind
from .metrics import Tally, basis, measure
from .reference import Format, PrecisionExhausted, format_of, round_to


class Prepared:
    """One case with its inputs rounded to the audited dtype and, computed once, its reference."""

    conventions: tuple = ()  # (a subclass that sets its own fields, sampled.py's, declares none)

    def __init__(
        self, case: Case, fmt: Format, case_in_family: int, recipe: tuple | None = None, conventions: tuple = ()
    ):
        self.case, self.fmt, self.case_in_family = case, fmt, case_in_family
        #: (family, suite, seed) of a built-in family's case: a kept one is made again from it, not stored
        self.recipe = recipe
        #: the candidate's declared conventions (Candidate.conventions) that change this case's exact problem
        #: (`problem`): its reference, conditioning and comparisons are theirs; the candidate's calls stay the case's
        self.conventions = kinds.get(case.kind).departures(conventions, case.options)
        self.inputs, self.mask = _rounded_inputs(case, fmt), case.mask
        #: how many finite input values overflow the dtype (what a row with nothing compared says); counted now,
        #: since a kept case holds its rounded inputs only
        self.overflowed = sum(
            int(np.count_nonzero(np.isfinite(a) & ~np.isfinite(self.inputs[n].astype(np.float64))))
            for n, a in case.arrays.items()
            if n not in kinds.get(case.kind).integers
        )

    def __getstate__(self) -> dict:
        """What a kept case holds (softaudit/_store.py): each reference packed (softaudit/_packed.py), and its rounded
        inputs and mask where it has no recipe (a built-in case's are made again when it is read, `PreparedFamily`, and
        checked against the digest kept in their place); not the float64 originals, nor what is derived from the
        reference (the bases: ulps, masks, conditioning scales and the fail line's budgets, kept where the outputs
        are few: `_keeps_extras`) or from the inputs (the invariants' probes), which `references`, `bases` and
        `probes` compute again when first read: the file is about 7x smaller, and the measures read the same bits."""
        names = ("fmt", "case_in_family", "recipe", "overflowed", "conventions")
        state = {name: self.__dict__[name] for name in names}
        if self.recipe is None:
            state["inputs"], state["mask"] = self.inputs, self.mask
            state["case"] = dataclasses.replace(self.case, arrays={})
        else:
            state["digest"], state["kind"] = _digest(self.inputs, self.mask), self.case.kind
        state["packed"] = tuple(_packed.pack(ref, self.inputs) for ref in self.references)
        if self._keeps_extras:
            state["extras"] = self.__dict__.get("extras") or self._conditioning()
            state["lines"] = self.__dict__.get("lines") or self._lines()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "case" in state:  # (one without a recipe: its inputs were kept; a built-in one's, `remade`)
            kept = kinds.get(self.case.kind).kept
            self.case = dataclasses.replace(self.case, arrays=_AsFloat64(self.inputs, kept))

    def remade(self, case: Case) -> None:
        """Take a kept built-in case's inputs from its family made again (`case`, the same recipe's): ValueError
        if they are not the bits it was prepared from (a family that does not make the same cases every time)."""
        inputs = _rounded_inputs(case, self.fmt)
        if _digest(inputs, case.mask) != self.__dict__.pop("digest") or case.kind != self.__dict__.pop("kind"):
            raise ValueError(f"{case.family} made other inputs than those its kept references were computed from")
        self.case, self.inputs, self.mask = case, inputs, case.mask

    def adopt(self, computed: Prepared) -> None:
        """Take what `computed` (the same case, computed in this process) has derived already, so that a case read
        back from the file just written is not derived again. Its bases read hi and lo from this case's references
        (unpacked from the file, the same bits): the computed references, error bounds and tiers are let go (they
        raised the cold main job's peak memory)."""
        for name in ("probes", "leak_probe"):
            if name in computed.__dict__:
                self.__dict__[name] = computed.__dict__[name]
        if "bases" in computed.__dict__:
            self.bases = tuple(
                dataclasses.replace(b, hi=ref.hi, lo=None if b.lo is None else ref.lo)
                for b, ref in zip(computed.bases, self.references)
            )

    @property
    def nbytes(self) -> int:
        """About what this case holds once its reference and basis exist (about 100 bytes per input element)."""
        return 100 * sum(a.size for a in self.inputs.values())

    @property
    def kind(self) -> Kind:
        return kinds.get(self.case.kind)

    @functools.cached_property
    def problem(self) -> tuple:
        """(mask, options) of the exact problem: the case's own, or, where declared conventions depart from the
        kind's defaults (`conventions`), the declared problem in the defaults' terms (a top-left causal limit as a
        mask: `Kind.problem`)."""
        return self.kind.problem(self.inputs, self.mask, self.case.options, self.conventions)

    @functools.cached_property
    def references(self) -> tuple:
        """The exact results, one reference Result per output of the kind (a kept case's unpacked)."""
        packed = self.__dict__.pop("packed", None)
        if packed is not None:
            return tuple(_packed.unpack(p, self.inputs) for p in packed)
        mask, options = self.problem
        with one_thread():  # (tier A's float64 products, whose last bits move with BLAS's thread count)
            return self.kind.reference(self.kind, self.inputs, mask, self.fmt.dtype, **options)

    @functools.cached_property
    def bases(self) -> tuple:
        """The reference side of the measures, one per output, shared by every candidate. Computed with one BLAS
        thread, as the references are: a table may not depend on the thread count of the process that prepared it."""
        with one_thread():
            extras = self.__dict__.get("extras") or self._conditioning()
            lines = self.__dict__.get("lines") or self._lines()
            if self._keeps_extras:
                self.extras, self.lines = extras, lines
            return tuple(
                basis(self.case.kind, self.output_format(i), ref, budget=t, reorder=dt, **extra)
                for i, (ref, extra, (t, dt)) in enumerate(zip(self.references, extras, lines))
            )

    def output_format(self, index: int) -> Format:
        """The format output `index` is measured in: the audited one, or the kind's own for it (`Kind.formats`)."""
        own = self.kind.output_dtype(index, None)
        return self.fmt if own is None else format_of(own)

    def _lines(self) -> tuple:
        """Each output's (T, dT) for the fail line (softaudit/budget.py, `line`): the standard algorithms' rounding
        budget and what their sums in another order cost beyond pairwise ones."""
        refs = self.references
        exact = tuple(ref.hi if not ref.lo.any() else ref.hi + ref.lo for ref in refs)
        found = budget.line(
            self.case.kind, self.inputs, self.mask, exact, self.fmt.precision, self.fmt.emin, self.case.options
        )
        return ((None, None),) * len(refs) if found is None else found

    def _conditioning(self) -> tuple[dict, ...]:
        """What the measures need beyond each reference (the scale, undefined rows: the kind's conditioning part)."""
        mask, options = self.problem
        return self.kind.conditioning(self.kind, self.inputs, mask, self.references, **options)

    @property
    def _keeps_extras(self) -> bool:
        """Whether a kept case holds its conditioning (scales, undefined rows) rather than computing it again: where
        its outputs are fewer than a quarter of its inputs (attention, log-sum-exp), the scale costs a pass over
        every input for few outputs (for attention, far more CPU per read than the few bytes kept cost)."""
        outputs = sum(math.prod(shape) for shape in self.output_shapes)
        return 4 * outputs < sum(a.size for a in self.inputs.values())

    @property
    def reference(self):
        """The reference of the first output (a forward kind's only one)."""
        return self.references[0]

    @property
    def basis(self):
        """The basis of the first output (a forward kind's only one)."""
        return self.bases[0]

    def complete(self) -> None:
        """Compute now what is otherwise computed when first needed (reference, basis, probes), to keep it."""
        for name in DERIVED:
            getattr(self, name)

    @property
    def output_shapes(self) -> tuple[tuple, ...]:
        return tuple(ref.value.shape for ref in self.references)

    @property
    def output_shape(self) -> tuple:
        """The shape of the first output (a forward kind's only one)."""
        return self.reference.value.shape

    def output(self, index: int) -> Prepared | OutputView:
        """This case seen through one output of the kind (a forward kind's only output is the case itself)."""
        return self if index == 0 else OutputView(self, index)

    @functools.cached_property
    def probes(self) -> invariants.Probes | None:
        """The invariants' transformed inputs (row kinds, cases up to invariants.MAX_ELEMENTS elements)."""
        x = self.inputs.get("x")
        if not self.kind.invariants or x is None or x.size > invariants.MAX_ELEMENTS:
            return None
        return invariants.Probes(self.case.kind, self.inputs, self.mask, self.fmt.dtype, seed=self.case_in_family)

    @functools.cached_property
    def reruns(self) -> reproducibility.Reruns | None:
        """The reproducibility calls (every kind; the first reproducibility.CASES cases of a family, whose inputs
        hold up to reproducibility.MAX_ELEMENTS)."""
        too_big = sum(a.size for a in self.inputs.values()) > reproducibility.MAX_ELEMENTS
        if too_big or self.case_in_family >= reproducibility.CASES:
            return None
        return reproducibility.Reruns(
            self.case.kind,
            self.inputs,
            self.mask,
            self.fmt.dtype,
            seed=self.case_in_family,
            options=self.case.options,
            last_query=not self.conventions,  # (top-left: the last query alone is query 0, another problem)
        )

    @functools.cached_property
    def leak_probe(self) -> tuple[dict, np.ndarray] | None:
        """For a kind with the leak probe (attention) and a mask: inputs with some masked keys' k and v replaced, and
        the queries that must not change (those that may attend none of the replaced keys in any batch entry, and
        some key in one)."""
        if not self.kind.leak_probe or self.mask is None:
            return None
        rng = np.random.default_rng(self.case_in_family)
        keep = self.mask.reshape((-1,) + self.mask.shape[-2:]).any(axis=0)  # (Lq, Lk): may attend anywhere
        masked_counts = np.where(keep.any(axis=1), (~keep).sum(axis=1), 0)
        if not masked_counts.any():
            return None
        replaced = ~keep[int(np.argmax(masked_counts))]  # the masked keys of the most masked query
        # Queries with nothing kept are judged by the fully-masked rule (whatever they give moves with every key).
        unaffected = ~keep[:, replaced].any(axis=1) & keep.any(axis=1)
        inputs = dict(self.inputs)
        for name in ("k", "v"):
            arr = inputs[name].astype(np.float64)
            arr[..., replaced, :] = rng.standard_normal(arr[..., replaced, :].shape) * 8
            inputs[name] = round_to(arr, self.fmt.dtype)
        return inputs, unaffected


#: What `complete` computes and a kept case derives again when it is read (`Prepared.__getstate__`).
DERIVED = ("references", "bases", "probes", "leak_probe")


def _rounded_inputs(case: Case, fmt: Format) -> dict:
    """The case's arrays rounded to the audited dtype (this IS the input); integer inputs (class labels) as int64,
    and those the kind keeps in their own dtype (`Kind.kept`: FP8 inputs and their descales) as the case gives
    them."""
    kind = kinds.get(case.kind)
    return {
        name: np.asarray(a, np.int64)
        if name in kind.integers
        else np.asarray(a)
        if name in kind.kept
        else round_to(a, fmt.dtype)
        for name, a in case.arrays.items()
    }


def _digest(inputs: dict, mask) -> bytes:
    """A digest of a case's rounded inputs and mask, names, shapes and bits."""
    digest = hashlib.blake2b(digest_size=16)
    for name, a in [*sorted(inputs.items()), ("mask", mask)]:
        a = np.zeros(0) if a is None else np.ascontiguousarray(a)
        digest.update(f"{name} {a.dtype.str} {a.shape}".encode())
        digest.update(a.reshape(-1).view(np.uint8))
    return digest.digest()


class _AsFloat64(collections.abc.Mapping):
    """A kept case's arrays: its rounded inputs as float64 (exact values, which round to the same inputs), where a
    computed case holds the float64 originals; those the kind keeps in their own dtype (`Kind.kept`) as they are."""

    def __init__(self, inputs: dict, kept: tuple = ()):
        self._inputs, self._kept = inputs, kept

    def __getitem__(self, name: str) -> np.ndarray:
        return self._inputs[name] if name in self._kept else self._inputs[name].astype(np.float64)

    def __iter__(self):
        return iter(self._inputs)

    def __len__(self) -> int:
        return len(self._inputs)


class OutputView:
    """A prepared case seen through one of its kind's outputs (attention_grad's dk, dv): that output's reference,
    basis and shape; everything else is the case's."""

    def __init__(self, pc: Prepared, index: int):
        self.pc, self.index = pc, index
        self.case, self.fmt, self.case_in_family, self.inputs, self.mask, self.overflowed = (
            pc.case,
            pc.output_format(index),
            pc.case_in_family,
            pc.inputs,
            pc.mask,
            pc.overflowed,
        )
        self.conventions = pc.conventions

    @property
    def problem(self) -> tuple:
        return self.pc.problem

    @property
    def reference(self):
        return self.pc.references[self.index]

    @property
    def basis(self):
        return self.pc.bases[self.index]

    @property
    def output_shape(self) -> tuple:
        return self.pc.output_shapes[self.index]


@dataclasses.dataclass
class Comparison:
    """A comparison implementation's errors on a family (None: it computed nothing comparable)."""

    name: str
    max_cond: float | None  # its max conditioning-scaled error: the plain one's bounds a fail
    max_ulp: float | None  # its max ULP error: best practice's bounds a warn
    case_abs: list  # per case, its max |y - r| (NaN where nothing was compared)
    error: str = ""  # why it could not run, if it could not
    flushed: int = 0  # its subnormal results that came out 0: best practice's bounds a flush warning
    underflow: int = 0  # its zeros where the correctly rounded result is not 0 (flushed ones included)


@dataclasses.dataclass
class PreparedFamily:
    """One family's prepared cases for a kind, dtype, suite and seed, and the comparisons' errors on them."""

    prepared: list[Prepared]
    # Each a list with one Comparison per output of the kind (None: not run yet):
    plain: list | None = None  # the plain implementation in the dtype
    best: list | None = None  # best practice
    others: list | None = None  # the other standard same-dtype algorithms, each a list
    practices: list | None = None  # best practice in other orders, each a list (float32, float64: `practice`)
    stored: Path | None = None  # the store file it was read from (what worker processes map), if any
    #: The cases left out because their exact result could not be decided (`decided`): (case index, description,
    #: why); each unit on the family says so in an `error` row.
    undecided: list = dataclasses.field(default_factory=list)

    def __setstate__(self, state: dict) -> None:
        """A kept family as read: its built-in cases' inputs made again, once per recipe (cheap against storing
        them, which took most of the main job's folder)."""
        self.__dict__.update(state)
        remake = collections.defaultdict(list)
        for pc in self.prepared:
            if "inputs" not in pc.__dict__:
                remake[pc.recipe].append(pc)
        for (name, suite, seed), pcs in remake.items():
            made = FAMILIES[name].cases(pcs[0].__dict__["kind"], pcs[0].fmt, suite, seed)
            for pc in pcs:
                pc.remade(made[pc.case_in_family])

    @property
    def comparisons(self) -> list[Comparison]:
        """Every comparison of every output."""
        held = (self.plain, self.best, *(self.others or ()), *(self.practices or ()))
        return [c for per_output in held if per_output for c in per_output]

    def plain_cond(self, output: int) -> float | None:
        """The largest max_cond_err of the standard same-dtype algorithms on one output: a fail is worse than
        factor x this."""
        found = [c[output].max_cond for c in (self.plain, *(self.others or ())) if c and c[output].max_cond is not None]
        return max(found) if found else None

    @functools.cached_property
    def nbytes(self) -> int:
        """About what the family holds (`Prepared.nbytes`), counted once: the process cache adds it up on every
        family it keeps (over every case, that would show in a warm main job's time)."""
        return sum(pc.nbytes for pc in self.prepared)

    def best_ulp(self, output: int) -> float | None:
        """Best practice's max ULP error on one output (`practice`): a warn is worse than factor x this."""
        best = self.practice(output)
        return None if best is None else best.max_ulp

    def practice(self, output: int) -> Comparison | None:
        """What a warn is judged against on one output: best practice's errors, and in dtypes of PRACTICE_BITS or more
        the worst of them and best practice's in other summation orders' (`Kind.practice`: one order's luck is no
        trade-off where best practice computes in the dtype itself)."""
        if not self.best:
            return None
        best = self.best[output]
        if best.error or not self.prepared or self.prepared[0].fmt.precision < PRACTICE_BITS:
            return best
        same = [c[output] for c in self.practices or () if not c[output].error]
        if not same:
            return best
        worst = [best, *same]
        return dataclasses.replace(
            best,
            max_cond=_worst(c.max_cond for c in worst),
            max_ulp=_worst(c.max_ulp for c in worst),
            flushed=max(c.flushed for c in worst),
            underflow=max(c.underflow for c in worst),
        )


#: From this precision up (float32, float64) best practice computes in the dtype itself (float32 kernels work in
#: float32, and double-double is beyond what float64 kernels do), so its error is one summation order's luck: best
#: practice is what careful kernels of the dtype do, `PreparedFamily.practice`.
PRACTICE_BITS = 24


def _worst(values) -> float | None:
    """The largest of values that are not None (None if all are)."""
    found = [v for v in values if v is not None]
    return max(found) if found else None


#: Prepared built-in families kept between audit() calls in this process, least recently used dropped first
#: once they hold more than about this many bytes. 0 turns the cache off; `clear_cache()` empties it.
CACHE_BYTES = 512 << 20
_CACHE: collections.OrderedDict[tuple, PreparedFamily] = collections.OrderedDict()
_UNWRITABLE: set[Path] = set()  # cache folders a write failed in
_WRITTEN: dict[Path, int] = {}  # cache folder -> the bytes this process wrote there since it last pruned it
#: A process prunes the cache folder after writing this much to it (and at the end of an audit): pruning scans every
#: file of the folder, so once per family written would scan a folder as many times as it holds files.
PRUNE_BYTES = 256 << 20


def clear_cache() -> None:
    """Forget every prepared family (inputs, references, comparison errors) kept between audits."""
    _CACHE.clear()


_DEPARTURES: dict[tuple, tuple] = {}  # (family, kind, dtype, suite, seed, conventions) -> `departures`


def departures(source, fmt: Format, suite: str, seed: int, conventions: tuple) -> tuple:
    """The declared conventions (Candidate.conventions) that change the exact problem of some case of the family
    (softaudit.plan.Source) in this dtype, as `prepare` takes them: () where none does, and the candidate's units
    share the family prepared for the kind's defaults. Its built-in cases are made to read their options (once per
    process: they are deterministic)."""
    if not conventions:
        return ()
    kind = kinds.get(source.kind)
    key = (source.name, source.kind, fmt.name, suite, seed, conventions)
    if source.builtin is not None and key not in _DEPARTURES:
        made = source.builtin.cases(source.kind, fmt, suite, seed)
        _DEPARTURES[key] = tuple(sorted({p for case in made for p in kind.departures(conventions, case.options)}))
    found = set(_DEPARTURES.get(key, ())) | {p for c in source.extra for p in kind.departures(conventions, c.options)}
    return tuple(sorted(found))


def prepare(
    source,
    fmt: Format,
    suite: str,
    seed: int,
    cache: bool,
    folder: Path | None,
    timeout,
    ex: Executor,
    conventions: tuple = (),
) -> PreparedFamily:
    """One family of a plan (softaudit.plan.Source) prepared, with the comparison implementations' errors: its
    built-in cases (kept, see `family`), then the cases of case files and the corpus, read fresh every time (they
    may have changed). A family a case file added to is compared afresh, every case. conventions: declared ones
    (`departures`) its exact results are computed for, () for the kind's defaults."""
    kind = source.kind
    fam = (
        family(source.builtin, kind, fmt, suite, seed, cache, folder, timeout, ex, conventions)
        if source.builtin
        else None
    )
    if source.extra:
        cases, undecided = (list(fam.prepared), fam.undecided) if fam else ([], [])
        start = len(cases) + len(undecided)  # (every built-in case keeps its index, decided or not)
        extra = [Prepared(case, fmt, start + i, conventions=conventions) for i, case in enumerate(source.extra)]
        kept = []
        for pc in extra:  # a case file's mistake (shapes that do not fit) named with its file
            try:
                found = decided([pc])  # (its reference computed now, and its basis)
                if found[0]:
                    pc.bases  # noqa: B018
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{pc.case.description}: {exc}") from None
            kept += found[0]
            undecided = undecided + found[1]
        fam = PreparedFamily(cases + kept, undecided=undecided)
    compare(fam, kind, timeout, ex)
    return fam


def family(
    family,
    kind: str,
    fmt: Format,
    suite: str,
    seed: int,
    cache: bool,
    folder: Path | None,
    timeout,
    ex: Executor,
    conventions: tuple = (),
) -> PreparedFamily:
    """A built-in family prepared: from this process's cache, from the folder on disk, or computed (and then kept);
    its exact results those of the declared conventions given (`departures`), () the kind's defaults."""
    key = (family.name, kind, fmt.name, suite, seed, conventions)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    path = _path(family, kind, fmt, suite, seed, folder, conventions)
    found = _mapped(path) if path else None
    if found is None:
        made = family.cases(kind, fmt, suite, seed)
        recipe = (family.name, suite, seed)
        kept, undecided = decided([Prepared(case, fmt, i, recipe, conventions) for i, case in enumerate(made)])
        found = PreparedFamily(kept, undecided=undecided)
        # (a family whose comparisons failed to run is not kept)
        if path and folder not in _UNWRITABLE and compare(found, kind, timeout, ex):
            for pc in found.prepared:
                pc.complete()
            try:
                _WRITTEN[folder] = _WRITTEN.get(folder, 0) + _store.save(path, found)
                kept = _mapped(path)  # mapped: the inputs' pages are the system's to drop and read again
                if kept is not None:
                    for pc, computed in zip(kept.prepared, found.prepared):
                        pc.adopt(computed)
                    found = kept
            except OSError as exc:  # said once; the folder is not tried again in this process
                _UNWRITABLE.add(folder)
                warnings.warn(f"softaudit: cannot keep prepared cases in {folder}: {exc}", stacklevel=4)
    if cache and CACHE_BYTES > 0:
        _CACHE[key] = found
        held = sum(f.nbytes for f in _CACHE.values())
        while held > CACHE_BYTES and len(_CACHE) > 1:
            _, dropped = _CACHE.popitem(last=False)
            held -= dropped.nbytes
    return found


def _path(family, kind: str, fmt: Format, suite: str, seed: int, folder: Path | None, conventions: tuple):
    """The file in the folder that keeps the built-in family prepared (None without a folder)."""
    declared = "".join(f"-{name}={value}" for name, value in conventions)
    stem = f"{_store.fingerprint()}-{family.name}-{kind}-{fmt.name}-{suite}-{seed}{declared}"
    return folder / f"{stem}.pkl" if folder else None


def kept(source, fmt: Format, suite: str, seed: int, folder: Path | None, conventions: tuple = ()) -> bool:
    """Whether the family (softaudit.plan.Source) is prepared already, in this process or in the folder, so that
    preparing it costs a read rather than its exact results (a case file's cases are computed every time: only a
    source with nothing but those is never kept). Looks only: nothing is read or moved."""
    if source.builtin is None:
        return False
    if (source.builtin.name, source.kind, fmt.name, suite, seed, conventions) in _CACHE:
        return True
    path = _path(source.builtin, source.kind, fmt, suite, seed, folder, conventions)
    return path is not None and path.exists()


def decided(prepared: list[Prepared]) -> tuple[list[Prepared], list[tuple]]:
    """The cases whose exact results the reference decides (computed now), and (case index, description, why) for
    each it cannot: a rounding still undecided at the reference's precision cap (docs/reference.md, "Inputs the
    reference cannot decide"). Such a case is left out of the family, so that the run goes on without it."""
    kept, undecided = [], []
    for pc in prepared:
        try:
            pc.references  # noqa: B018
        except PrecisionExhausted as exc:
            undecided.append((pc.case_in_family, pc.case.description, f"{type(exc).__name__}: {exc}"))
        else:
            kept.append(pc)
    return kept, undecided


def _mapped(path: Path) -> PreparedFamily | None:
    """The family kept at path, mapped from the file (None if there is none or it cannot be read)."""
    found = _store.load(path)
    if found is not None:
        found.stored = path
    return found


_SHARED: dict[str, PreparedFamily] = {}  # in a lane's process: share path -> the family it kept or mapped
_shares = itertools.count()


def share(fam: PreparedFamily, folder: Path) -> str:
    """Where worker processes map the family from: its cache file linked into `folder` (a private folder on the
    same file system: the link holds the file even if the cache is pruned meanwhile), else the family saved there.
    This process keeps the family itself for its own tasks (`shared`): its units run here (execute._lanes)."""
    path = folder / f"{os.getpid()}-{next(_shares)}.pkl"
    _SHARED[str(path)] = fam
    if fam.stored is not None:
        with contextlib.suppress(OSError):
            os.link(fam.stored, path)
            return str(path)
    for pc in fam.prepared:
        pc.complete()
    _store.save(path, fam)
    return str(path)


def shared(fam: PreparedFamily | str) -> PreparedFamily:
    """A prepared family as a task receives it: itself, or the path `share` gave (mapped once per process)."""
    if isinstance(fam, PreparedFamily):
        return fam
    if fam not in _SHARED:
        found = _store.load(Path(fam))
        if found is None:
            raise FileNotFoundError(f"softaudit: the prepared family shared at {fam} is gone")
        _SHARED[fam] = found
    return _SHARED[fam]


def forget(folder: Path) -> None:
    """Let go of the families this process kept from `share` into `folder` (an audit's end: its lanes are done)."""
    for path in [p for p in _SHARED if Path(p).parent == folder]:
        del _SHARED[path]


def finish(folder: Path | None, last: bool = False, others: bool = False) -> None:
    """Prune the cache folder once this process has written PRUNE_BYTES to it since it last pruned it; last (the end
    of an audit): once it has written anything to it, or when others (the audit's worker processes) may have."""
    written = _WRITTEN.get(folder, 0)
    if folder is not None and (written >= PRUNE_BYTES or (last and (written or others))):
        _WRITTEN.pop(folder, None)
        _store.prune(folder)


def compare(fam: PreparedFamily, kind: str, timeout, ex: Executor) -> bool:
    """Run the comparisons on the family (the plain implementation, the other standard same-dtype algorithms, best
    practice), where not yet run; False if one of them failed to run."""
    for role, pick in (("plain", builtin.plain), ("best", builtin.best)):
        if getattr(fam, role) is None:
            setattr(fam, role, comparison(pick(kind), fam.prepared, timeout, ex))
    if fam.others is None:
        fam.others = [comparison(c, fam.prepared, timeout, ex) for c in builtin.standard(kind)[1:]]
    if fam.practices is None:
        precise = bool(fam.prepared) and fam.prepared[0].fmt.precision >= PRACTICE_BITS
        fam.practices = [comparison(c, fam.prepared, timeout, ex) for c in builtin.practice(kind)] if precise else []
    return not any(c.error for c in fam.comparisons)


def comparison(candidate: Candidate, prepared: list[Prepared], timeout, ex: Executor) -> list[Comparison]:
    """The comparison's errors on the family, one Comparison per output of the kind."""
    outputs = len(kinds.get(candidate.kind).outputs)
    tallies = [Tally() for _ in range(outputs)]
    case_abs = [[] for _ in range(outputs)]
    try:
        for called in calls(candidate, prepared, timeout, ex, probes=False, problem=True):
            for index, y in enumerate(called.outputs):
                part = measure(called.pc.output(index).basis, y, case_index=called.pc.case_in_family)
                tallies[index].merge(part)
                case_abs[index].append(part.max_abs_err if part.elements else math.nan)
    except (CandidateError, CandidateSkip) as exc:
        return [Comparison(candidate.name, None, None, [math.nan] * len(prepared), str(exc))] * outputs
    compared = [t.elements > 0 for t in tallies]
    return [
        Comparison(
            candidate.name,
            t.max_cond_err if c else None,
            t.max_ulp if c else None,
            a,
            flushed=t.flushed,
            underflow=t.underflow,
        )
        for t, c, a in zip(tallies, compared, case_abs)
    ]
