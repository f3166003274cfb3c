"""The table bench_peers.py prints: one row per metric, one column per engine, and the
ratio of the first engine's figure to each other's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

UNITS = {"rows/s": "{:,.0f}", "ms": "{:,.0f}", "MiB": "{:,.0f}"}


@dataclass(frozen=True, slots=True)
class Metric:
    """One measured quantity and each engine's figure for it (absent: not measured)."""

    name: str
    unit: str
    figures: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit {self.unit!r}: expected one of {', '.join(UNITS)}")


def ratio(ours: float | None, theirs: float | None) -> str:
    """``ours ÷ theirs`` to two decimals, or a dash when either is missing or zero."""
    if ours is None or theirs is None or theirs == 0:
        return "—"
    return f"{ours / theirs:.2f}"


def render(metrics: Sequence[Metric], engines: Sequence[str]) -> str:
    """The table as text: the first of ``engines`` is compared with each of the others
    (above 1 means its figure is the larger: better for rows/s, worse for ms and MiB)."""
    ours, others = engines[0], engines[1:]
    header = ["metric", *engines, *(f"{ours} ÷ {other}" for other in others)]
    lines = [header]
    for metric in metrics:
        cells = [f"{metric.name} ({metric.unit})"]
        for engine in engines:
            value = metric.figures.get(engine)
            cells.append("—" if value is None else UNITS[metric.unit].format(value))
        for other in others:
            cells.append(ratio(metric.figures.get(ours), metric.figures.get(other)))
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )
