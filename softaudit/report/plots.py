"""Small inline SVG charts (no plotting library, no script): lines on log axes, and bars."""

from __future__ import annotations

import math
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 600, 300, 58, 210, 28, 44


def _scale(lo: float, hi: float, log: bool, size: float, flip: bool):
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    span = (hi - lo) or 1.0

    def place(v):
        t = ((math.log10(v) if log else v) - lo) / span
        return size * (1 - t) if flip else size * t

    return place


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    """At most about seven ticks: every decade, or every few decades on a long axis."""
    if log:
        first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        step = max(1, math.ceil((last - first) / 6))
        return [10.0**e for e in range(first, last + 1, step)]
    step = (hi - lo) / 4 or 1.0
    return [lo + i * step for i in range(5)]


def _ulp_ticks(top: float) -> list[float]:
    """Error values for the y axis (drawn at 1 + value on a log scale): 0, 1, 10, 100, ... up to top; on a long
    axis every few decades, and without 1, which would sit on 0."""
    decades = max(1, math.ceil(math.log10(top)))
    step = max(1, math.ceil(decades / 6))
    return [0.0] + [10.0**e for e in range(0 if step == 1 else step, decades + 1, step)]


def _label(value: float) -> str:
    """A tick's text, short: 0.5, 1, 100, 1e4, 1e-6."""
    text = f"{value:g}"
    return text.replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")


def line_chart(title: str, series: dict, x_label: str, y_label: str, colours=None, logx: bool = True) -> str:
    """series: name -> [(x, y, bad)]. y is drawn on a log axis of 1 + y (errors start at 0), up to at least 2 so
    that 1 (a correct rounding) is on it; a point with bad set (NaN or inf outputs) is a cross at the top of the
    chart, and a NaN y only that cross. colours: name -> colour (else by place in series)."""
    points = [(x, y, bad) for pts in series.values() for x, y, bad in pts if x > 0 or not logx]
    if len({x for x, _, _ in points}) < 2:  # one x value says nothing a table does not
        return ""
    xs = [x for x, _, _ in points]
    ys = [1 + max(y, 0.0) for _, y, _ in points if math.isfinite(y)] or [1.0]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = 1.0, max(max(ys) * 1.5, 3.0)
    px = _scale(x_lo, x_hi if x_hi > x_lo else x_lo * 10, logx, WIDTH - LEFT - RIGHT, False)
    py = _scale(y_lo, y_hi, True, HEIGHT - TOP - BOTTOM, True)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" height="{HEIGHT}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<text x="{WIDTH / 2}" y="16" text-anchor="middle" class="t">{escape(title)}</text>',
        f'<g transform="translate({LEFT},{TOP})">',
    ]
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts.append(f'<rect width="{inner_w}" height="{inner_h}" class="frame"/>')
    x_ticks = [t for t in _ticks(x_lo, x_hi if x_hi > x_lo else x_lo * 10, logx) if x_lo <= t <= max(x_hi, x_lo)]
    if len(x_ticks) < 3 and len(set(xs)) <= 8:  # a decade or two: the values themselves say more
        x_ticks = sorted(set(xs))
    for tick in x_ticks:
        x = px(tick)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{inner_h}" class="grid"/>'
            f'<text x="{x:.1f}" y="{inner_h + 14}" text-anchor="middle">{_label(tick)}</text>'
        )
    for tick in _ulp_ticks(y_hi - 1):
        if y_lo <= 1 + tick <= y_hi:
            y = py(1 + tick)
            parts.append(
                f'<line x1="0" x2="{inner_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                f'<text x="-6" y="{y + 4:.1f}" text-anchor="end">{_label(tick)}</text>'
            )
    crosses = False
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(p for p in pts if p[0] > 0 or not logx)
        color = (colours or {}).get(name, PALETTE[i % len(PALETTE)])
        line = [(x, 1 + max(y, 0.0)) for x, y, _ in pts if math.isfinite(y)]
        if line:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in line)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>')
            parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{color}"/>' for x, y in line]
        for x, _, bad in pts:
            if bad:
                crosses = True
                c, d = px(x), 4 + 3 * (i % 4)  # staggered, so candidates failing at one x stay apart
                parts.append(
                    f'<path d="M{c - 4:.1f},{d - 4} L{c + 4:.1f},{d + 4} M{c - 4:.1f},{d + 4} L{c + 4:.1f},{d - 4}" '
                    f'stroke="{color}" stroke-width="2"><title>{escape(str(name))}: NaN or inf at {x:g}</title></path>'
                )
        parts.append(
            f'<text x="{inner_w + 8}" y="{12 + 14 * i}" style="fill:{color}" class="legend">{escape(str(name))}</text>'
        )
    if crosses:
        parts.append(f'<text x="{inner_w + 8}" y="{inner_h}" class="legend">x: NaN or inf outputs</text>')
    parts.append(f'<text x="{inner_w / 2}" y="{inner_h + 32}" text-anchor="middle">{escape(x_label)}</text>')
    parts.append(
        f'<text transform="rotate(-90)" x="{-inner_h / 2}" y="-44" text-anchor="middle">{escape(y_label)}</text>'
    )
    parts.append("</g></svg>")
    return "".join(parts)


def bar_chart(title: str, labels: list[str], counts: list[int], x_label: str) -> str:
    if not counts or not any(counts):
        return ""
    inner_w, inner_h = WIDTH - LEFT - 20, HEIGHT - TOP - BOTTOM
    width = inner_w / len(counts)
    top = max(counts)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" height="{HEIGHT}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<text x="{WIDTH / 2}" y="16" text-anchor="middle" class="t">{escape(title)}</text>',
        f'<g transform="translate({LEFT},{TOP})"><rect width="{inner_w}" height="{inner_h}" class="frame"/>',
    ]
    for i, (label, count) in enumerate(zip(labels, counts)):
        h = 0.9 * inner_h * count / top  # room above the tallest bar for its count
        parts.append(
            f'<rect x="{i * width + 2:.1f}" y="{inner_h - h:.1f}" width="{width - 4:.1f}" height="{h:.1f}" '
            f'fill="{PALETTE[0]}"/>'
            f'<text x="{i * width + width / 2:.1f}" y="{inner_h + 14}" text-anchor="middle">{escape(label)}</text>'
            f'<text x="{i * width + width / 2:.1f}" y="{inner_h - h - 3:.1f}" text-anchor="middle">{count}</text>'
        )
    parts.append(f'<text x="{inner_w / 2}" y="{inner_h + 32}" text-anchor="middle">{escape(x_label)}</text></g></svg>')
    return "".join(parts)
