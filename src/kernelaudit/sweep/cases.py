"""Cases and the grids of cases around the thresholds.

A :class:`Case` is one concrete configuration: op, dtype, layout, size series,
threshold and position (just below, at, just above), batch count, direction, seed and
scale. It is plain data (JSON round-trips it); its inputs are regenerated from it on
any device (:mod:`kernelaudit.sweep.gen`), never read back from the device under test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from ..errors import InvalidArgument, check_choices
from .ops.catalog import ALL_OPS, QUICK_OPS, op_spec, per_batch_max
from .ops.spec import DIRECTIONS, DTYPES, LAYOUTS
from ..thresholds import Thresholds
from .axes import AXES, axis_batch, axis_dtypes, batch_for, crossing_measure, unit_per_batch

POSITIONS = ("below", "at", "above")
_POS_MARK = {"below": "-", "at": "", "above": "+"}


@dataclass(frozen=True)
class Case:
    """One configuration under test. ``batch`` is the leading size B."""

    op: str
    dtype: str
    layout: str
    series: str
    threshold: str
    position: str
    batch: int
    direction: str
    seed: int = 0
    scale: int = 32
    #: The size axis (:mod:`kernelaudit.sweep.axes`) whose limit ``threshold`` names.
    axis: str = "elements"

    @property
    def size(self) -> str:
        """Size label such as ``2^32-`` (below), ``2^32`` (at), ``2^32+`` (above)."""
        return f"{self.threshold}{_POS_MARK[self.position]}"

    @property
    def id(self) -> str:
        return f"{self.op}/{self.dtype}/{self.layout}/{self.series}/{self.size}/{self.direction}"

    @property
    def key(self) -> str:
        """Unique within a run store (the id plus seed and scale)."""
        return f"{self.id}/s{self.seed}/b{self.scale}"

    @property
    def tolerance_key(self) -> str:
        """Cases sharing a key share one calibrated tolerance."""
        key = f"{self.op}/{self.dtype}/{self.layout}/{self.direction}"
        tag = self.spec.shape_tag(self.thresholds) if self.spec.shape_tag is not None else ""
        if tag:  # batches grown past the sample's shapes calibrate on those shapes
            key += "/" + tag
        # Axes with tiny per-batch shapes calibrate on those shapes.
        return key + "/tiny" if AXES[self.axis].tiny_shapes else key

    @property
    def crossing_numel(self) -> int:
        """The elements of the case's crossing tensor (its series' largest per-batch
        operand or output, times the batch): what its limit counts on the elements axis."""
        return self.batch * per_batch_max(self.spec, self.series, self.thresholds)

    @property
    def thresholds(self) -> Thresholds:
        """The limits at this case's scale; per-batch shapes cut for its axis."""
        return AXES[self.axis].thresholds(self.scale)

    @property
    def spec(self):
        return op_spec(self.op)

    def with_batch(self, batch: int, **changes) -> "Case":
        d = asdict(self)
        d.update(batch=batch, **changes)
        return Case(**d)

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(id=self.id, size=self.size, family=self.spec.family)
        ax = AXES[self.axis]
        limits = ax.limits(self.thresholds)
        if self.threshold in limits:
            ops = self.spec.operands(self.series, self.batch, self.thresholds)
            d["shapes"] = [list(o.shape) for o in ops]
            d["crossing_numel"] = self.crossing_numel
            d["limit"] = limits[self.threshold]
            d["measure"] = crossing_measure(ax, self.spec, self.series, self.thresholds, self.dtype,
                                            self.layout, self.batch)
            d["unit"] = ax.unit
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Case":
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in fields})




@dataclass(frozen=True)
class GridSpec:
    """What to sweep. Every field is validated against what the ops admit."""

    ops: tuple[str, ...] = QUICK_OPS
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    layouts: tuple[str, ...] = LAYOUTS
    directions: tuple[str, ...] = DIRECTIONS
    thresholds: tuple[str, ...] = ("2^31", "2^32", "2*2^32")
    positions: tuple[str, ...] = POSITIONS
    seed: int = 0
    scale: int = 32
    #: Size axes (:data:`kernelaudit.sweep.axes.AXES`); ``thresholds`` picks the
    #: ``elements`` axis' limits, the other axes sweep all of theirs.
    axes: tuple[str, ...] = ("elements",)
    #: Run the ``below`` cases only as controls: each one only where its case above
    #: (or at) the same limit was not ok, after those have run. A screen that halves the
    #: grid where ops are right and still brackets every finding (``--quick``).
    bracket: bool = False

    def validate(self) -> "GridSpec":
        th = Thresholds(self.scale)
        if self.bracket and ("below" not in self.positions or set(self.positions) == {"below"}):
            raise InvalidArgument(f"Cannot have bracket=True with positions={','.join(self.positions)}: "
                                  "allowed are positions with below and at or above")
        check_choices("axes", self.axes, AXES)
        for op in self.ops:  # hand specs, else derived ops (loaded only when named)
            if op not in ALL_OPS:
                op_spec(op)
        if not self.ops:
            check_choices("ops", self.ops, ALL_OPS)
        check_choices("dtypes", self.dtypes, DTYPES)
        check_choices("layouts", self.layouts, LAYOUTS)
        check_choices("directions", self.directions, DIRECTIONS)
        check_choices("thresholds", self.thresholds, th.named())
        check_choices("positions", self.positions, POSITIONS)
        if self.seed < 0:
            raise InvalidArgument(f"Cannot have seed={self.seed}: allowed values are integers >= 0")
        return self


def grid(spec: GridSpec) -> list[Case]:
    """Every case of the grid an op admits, in a stable order (small sizes first per op)."""
    spec.validate()
    th = Thresholds(spec.scale)
    named = th.named()
    cases: list[Case] = []
    for axis in spec.axes:
        if axis != "elements":
            cases += _axis_grid(spec, AXES[axis])
            continue
        cases += _elements_grid(spec, th, named)
    return cases


def _directions(spec: GridSpec, o, dtype: str):
    for direction in spec.directions:
        if direction not in o.directions:
            continue
        if direction == "bwd" and not DTYPES[dtype].is_floating_point:
            continue
        yield direction


def _axis_grid(spec: GridSpec, ax) -> list[Case]:
    """The cases of a size axis other than ``elements``: per op, series, dtype and
    layout (the byte count depends on both), each limit and position."""
    th = ax.thresholds(spec.scale)
    limits = ax.limits(th)
    cases: list[Case] = []
    for op in spec.ops:
        o = op_spec(op)
        if not ax.applies(o):
            continue
        for series in o.series:
            for tname, limit in limits.items():
                for pos in spec.positions:
                    for dtype in axis_dtypes(ax, spec.dtypes, o):
                        for layout in spec.layouts:
                            if layout not in o.layouts:
                                continue
                            B = axis_batch(ax, o, series, th, dtype, layout, limit, pos)
                            # Past 2*2^32 elements the case outgrows the elements axis' largest
                            # (a dim of 2^31 rows of 16): the memory plan would skip it anyway.
                            if B < 1 or B * per_batch_max(o, series, th) > th.t33:
                                continue
                            for direction in _directions(spec, o, dtype):
                                cases.append(Case(op, dtype, layout, series, tname, pos, B, direction,
                                                  spec.seed, spec.scale, ax.name))
    return cases


def _elements_grid(spec: GridSpec, th: Thresholds, named: dict) -> list[Case]:
    cases: list[Case] = []
    for op in spec.ops:
        o = op_spec(op)
        for series in o.series:
            per = per_batch_max(o, series, th)
            for tname in spec.thresholds:
                for pos in spec.positions:
                    B = batch_for(named[tname], per, pos)
                    if B < 1:
                        continue
                    for dtype in spec.dtypes:
                        if dtype not in o.dtypes:
                            continue
                        for layout in spec.layouts:
                            if layout not in o.layouts:
                                continue
                            for direction in spec.directions:
                                if direction not in o.directions:
                                    continue
                                if direction == "bwd" and not DTYPES[dtype].is_floating_point:
                                    continue
                                cases.append(Case(op, dtype, layout, series, tname, pos, B, direction,
                                                  spec.seed, spec.scale))
    return cases


#: Calibration runs at most this many batches: enough samples of the per-batch error.
CALIBRATION_MAX_BATCHES = 64


def _calibration_cap(case: Case) -> int:
    """The most batches a calibration-sized run of ``case`` may take: far below every limit."""
    th = case.thresholds
    per = per_batch_max(case.spec, case.series, th)
    cap = th.t31 // (8 * per)
    ax = AXES[case.axis]
    if ax.name != "elements":  # at most half way to the axis' smallest limit
        unit, fixed = unit_per_batch(ax, case.spec, case.series, th, case.dtype, case.layout)
        cap = min(cap, (min(ax.limits(th).values()) - fixed - 1) // (2 * unit))
    return cap


def calibration_batch(case: Case) -> int:
    """A batch count far below every threshold, for tolerance calibration."""
    return max(1, min(CALIBRATION_MAX_BATCHES, _calibration_cap(case)))


#: Triton specialises an integer argument on divisibility by 16 (and on being 1).
SPECIALISATION_MODULUS = 16


def warm_batch(case: Case) -> int | None:
    """A small batch count giving ``case``'s strides the same Triton specialisation: the
    same residue modulo :data:`SPECIALISATION_MODULUS` (a stride that grows with the batch
    count, like a transposed operand's row stride, is then divisible by 16 exactly when
    the case's is), and 1 only for a case of one batch. None where that batch would not
    stay below the limits (at most twice a calibration's cap: a quarter of 2^31 elements,
    or the smallest limit of the case's axis). A judge run at this batch compiles the
    kernels the case will launch; its result is not used."""
    m = SPECIALISATION_MODULUS
    if case.batch <= m + 1:
        b = case.batch
    else:
        r = case.batch % m
        b = r if r >= 2 else r + m
    return b if b <= 2 * _calibration_cap(case) else None



def parse_list(value: str | Iterable[str] | None, default: Sequence[str],
               everything: Sequence[str] | None = None) -> tuple[str, ...]:
    """A comma list from the CLI: None gives ``default``, ``all`` gives ``everything``."""
    if value is None:
        return tuple(default)
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    else:
        items = list(value)
    if items == ["all"]:
        return tuple(everything if everything is not None else default)
    return tuple(items)


def bracket_key(c: Case) -> tuple:
    """What a ``below`` control shares with the cases above its limit: everything but the
    position (and the batch it sets)."""
    return (c.op, c.dtype, c.layout, c.series, c.threshold, c.direction, c.seed, c.scale, c.axis)


def in_turns(cases: Iterable[Case]) -> list[Case]:
    """``cases`` with the ops taken in turns: every op's smallest case (by crossing
    tensor), in the order the ops first appear, then every op's second, and so on. A run
    cut short by its device call's time then has probed every op, from its cheapest
    case, instead of spending the call on one op's dozens of cases."""
    by_op: dict[str, list[Case]] = {}
    for c in cases:
        by_op.setdefault(c.op, []).append(c)
    turns = [sorted(cs, key=lambda c: c.crossing_numel) for cs in by_op.values()]
    return [cs[i] for i in range(max(map(len, turns), default=0)) for cs in turns if i < len(cs)]
