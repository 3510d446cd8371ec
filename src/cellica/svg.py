"""Tiny inline-SVG charts for the HTML reports: fast (no matplotlib per gene), crisp, offline.

Every text that reaches the SVG is escaped.
"""

from __future__ import annotations

from html import escape

PALETTE = ["#1b6ca8", "#d1495b", "#2e933c", "#edae49", "#7b2cbf", "#00798c", "#6c757d", "#f17300"]


def _frame(width: int, height: int, body: str, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
            f"<title>{escape(title)}</title>{body}</svg>")


def bar_chart(labels: list[str], values: list[float], title: str, vmin: float = 0.0, vmax: float = 1.0,
              width: int = 420, bar_h: int = 18) -> str:
    """Horizontal bars with value labels; NaN values are drawn as 'n/a'."""
    left, pad = 110, 4
    height = pad * 2 + bar_h * len(labels) + 16
    span = max(vmax - vmin, 1e-12)
    parts = []
    for i, (lab, val) in enumerate(zip(labels, values, strict=True)):
        y = pad + i * bar_h
        parts.append(f'<text x="{left - 4}" y="{y + bar_h * 0.7:.1f}" text-anchor="end" font-size="11">{escape(str(lab))}</text>')
        if val == val:  # not NaN
            w = max(0.0, min(1.0, (val - vmin) / span)) * (width - left - 50)
            parts.append(f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{bar_h - 4}" fill="{PALETTE[i % len(PALETTE)]}"/>')
            parts.append(f'<text x="{left + w + 3:.1f}" y="{y + bar_h * 0.7:.1f}" font-size="11">{val:.3f}</text>')
        else:
            parts.append(f'<text x="{left + 3}" y="{y + bar_h * 0.7:.1f}" font-size="11">n/a</text>')
    parts.append(f'<text x="{left}" y="{height - 3}" font-size="10" fill="#555">{escape(title)}</text>')
    return _frame(width, height, "".join(parts), title)


def line_chart(series: dict[str, tuple[list[float], list[float]]], title: str, size: int = 260,
               diagonal: bool = True) -> str:
    """Lines on [0, 1] x [0, 1] (ROC curves), one colour per series, with a legend."""
    m = 30
    inner = size - 2 * m
    parts = [f'<rect x="{m}" y="{m}" width="{inner}" height="{inner}" fill="none" stroke="#999"/>']
    if diagonal:
        parts.append(f'<line x1="{m}" y1="{m + inner}" x2="{m + inner}" y2="{m}" stroke="#bbb" stroke-dasharray="4"/>')
    for i, (name, (xs, ys)) in enumerate(series.items()):
        pts = " ".join(f"{m + x * inner:.1f},{m + (1 - y) * inner:.1f}" for x, y in zip(xs, ys, strict=True))
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.6"/>')
        parts.append(f'<text x="{size + 5}" y="{m + 12 + 14 * i}" font-size="11" fill="{color}">{escape(name)}</text>')
    parts.append(f'<text x="{m}" y="{size - 8}" font-size="10" fill="#555">false positive rate</text>')
    parts.append(f'<text x="{m}" y="{m - 8}" font-size="10" fill="#555">{escape(title)}</text>')
    return _frame(size + 110, size, "".join(parts), title)


def scatter(points: list[tuple[float, float, str]], title: str, xlabel: str, ylabel: str, size: int = 220,
            highlight: str | None = None) -> str:
    """Points coloured by group; ``highlight`` is drawn on top with a dark outline."""
    m = 28
    inner = size - 2 * m
    if not points:
        return _frame(size, size, '<text x="10" y="20" font-size="11">no data</text>', title)
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    sx, sy = max(x1 - x0, 1e-12), max(y1 - y0, 1e-12)
    groups = sorted({p[2] for p in points if p[2] != highlight})
    colors = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}
    parts = [f'<rect x="{m}" y="{m}" width="{inner}" height="{inner}" fill="none" stroke="#ccc"/>']
    ordered = sorted(points, key=lambda p: p[2] == highlight)
    for x, y, g in ordered:
        cx, cy = m + (x - x0) / sx * inner, m + (1 - (y - y0) / sy) * inner
        if g == highlight:
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.6" fill="#000" fill-opacity="0.8"/>')
        else:
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="1.8" fill="{colors[g]}" fill-opacity="0.45"/>')
    legend = [f'<tspan fill="{colors[g]}">{escape(str(g))} </tspan>' for g in groups[:6]]
    parts.append(f'<text x="{m}" y="{m - 8}" font-size="10">{escape(title)}</text>')
    if highlight:
        legend.append(f'<tspan fill="#000">{escape(str(highlight))}</tspan>')
    parts.append(f'<text x="{m}" y="{size - 6}" font-size="9">{"".join(legend)}</text>')
    parts.append(f'<text x="{size - m}" y="{m + inner + 12}" font-size="9" text-anchor="end" fill="#555">{escape(xlabel)}</text>')
    parts.append(f'<text x="{m - 4}" y="{m + 10}" font-size="9" text-anchor="end" fill="#555" '
                 f'transform="rotate(-90 {m - 4} {m + 10})">{escape(ylabel)}</text>')
    return _frame(size, size, "".join(parts), title)
