"""Tiny inline-SVG charts for the HTML reports: fast (no matplotlib per gene), crisp, offline.

Every text that reaches the SVG is escaped.
"""

from __future__ import annotations

from html import escape

PALETTE = ["#1b6ca8", "#d1495b", "#2e933c", "#edae49", "#7b2cbf", "#00798c", "#6c757d", "#f17300"]
# One colour per feature set across every page: the registry's variants, then its baselines, in order.
# One colour per registered feature set, in the registry's order: 20 distinct (the second ten darker);
# past 20 they repeat.
SET_PALETTE = ("#1b6ca8", "#d1495b", "#2e933c", "#edae49", "#7b2cbf", "#00798c", "#8c564b", "#6c757d", "#e377c2",
               "#f17300", "#0b3c5d", "#8f2d56", "#1d5c2a", "#a8791f", "#4a1a7a", "#004e5a", "#5c3a32", "#2b3035",
               "#a14d8c", "#a34f00")
OTHER_SET = "#9a9a9a"  # a feature set the registry does not name
LABEL_CHARS = 30  # a bar's label longer than this is cut with an ellipsis (the whole name in its tooltip)


def set_colour(name: str) -> str:
    """The colour of feature set ``name`` wherever the report draws it (bars, curves, legends)."""
    from cellica.registry import BASELINES, VARIANTS

    names = (*VARIANTS, *BASELINES)  # the registry's order, read live
    return SET_PALETTE[names.index(name) % len(SET_PALETTE)] if name in names else OTHER_SET


def _cut(text: str, chars: int = LABEL_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "\u2026"


def _frame(width: int, height: int, body: str, title: str, kind: str = "") -> str:
    chart = f' data-chart="{kind}"' if kind else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}"{chart}>'
            f"<title>{escape(title)}</title>{body}</svg>")


def bar_chart(labels: list[str], values: list[float], title: str, vmin: float = 0.0, vmax: float = 1.0,
              width: int = 420, bar_h: int = 18, color: str | None = None, reference: float | None = None,
              reference_label: str = "", colors: list[str] | None = None,
              intervals: list[tuple[float, float]] | None = None, interval_label: str = "95% interval") -> str:
    """Horizontal bars from zero with value labels and a labelled value axis; NaN is 'n/a'.

    Every bar starts at 0 (a value below 0 extends left of it), so lengths compare as the values
    do; the axis shows ``vmin``, 0 and ``vmax``; ``reference`` (chance AUROC 0.5, a null) is a
    dashed line named by ``reference_label``; ``intervals`` (low, high) are whiskers across each
    bar's end (``interval_label`` in their tooltips). Bars take ``colors`` (one per bar: feature
    sets keep theirs, :func:`set_colour`), else ``color`` for all (the features of one
    classifier), else the palette by position. Labels longer than ``LABEL_CHARS`` are cut with an
    ellipsis (whole in the tooltip), and the chart widens to hold its title: no text is clipped.
    """
    vmin, vmax = min(vmin, 0.0), max(vmax, 0.0)
    shown = [_cut(str(lab)) for lab in labels]
    left = max(60, 7 * max((len(lab) for lab in shown), default=4) + 10)
    width = max(width, left + 200, 6 * len(title) + 8)
    pad, plot = 4, width - left - 50
    axis_y = pad + bar_h * len(labels) + 2
    height = axis_y + 30
    span = max(vmax - vmin, 1e-12)

    def x_of(v: float) -> float:
        return left + max(0.0, min(1.0, (v - vmin) / span)) * plot

    zero = x_of(0.0)
    parts = []
    for i, (lab, val) in enumerate(zip(labels, values, strict=True)):
        y = pad + i * bar_h
        parts.append(f'<text x="{left - 4}" y="{y + bar_h * 0.7:.1f}" text-anchor="end" font-size="11">'
                     f'<title>{escape(str(lab))}</title>{escape(shown[i])}</text>')
        if val == val:  # not NaN
            x = x_of(val)
            fill = colors[i] if colors else color or PALETTE[i % len(PALETTE)]
            low, high = intervals[i] if intervals else (val, val)
            tip = f"{number(val)}" + (f" [{number(low)}, {number(high)}]" if intervals and low == low else "")
            parts.append(f'<rect x="{min(x, zero):.1f}" y="{y + 2}" width="{abs(x - zero):.1f}" height="{bar_h - 4}" '
                         f'fill="{fill}"><title>{escape(str(lab))}: {tip}</title></rect>')
            end = max(x, zero)
            if intervals and low == low and high == high:
                xl, xh, mid = x_of(low), x_of(high), y + bar_h / 2
                parts.append(f'<path d="M{xl:.1f},{mid:.1f}H{xh:.1f}M{xl:.1f},{mid - 4:.1f}V{mid + 4:.1f}'
                             f'M{xh:.1f},{mid - 4:.1f}V{mid + 4:.1f}" stroke="#222" stroke-width="1.2" fill="none">'
                             f"<title>{escape(interval_label)} [{number(low)}, {number(high)}]</title></path>")
                end = max(end, xh)
            parts.append(f'<text x="{end + 3:.1f}" y="{y + bar_h * 0.7:.1f}" font-size="11">{number(val)}</text>')
        else:
            parts.append(f'<text x="{zero + 3:.1f}" y="{y + bar_h * 0.7:.1f}" font-size="11">n/a</text>')
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + plot}" y2="{axis_y}" stroke="#999"/>')
    for t in dict.fromkeys((vmin, 0.0, vmax)):
        parts.append(f'<line x1="{x_of(t):.1f}" y1="{axis_y}" x2="{x_of(t):.1f}" y2="{axis_y + 4}" stroke="#999"/>')
        parts.append(
            f'<text x="{x_of(t):.1f}" y="{axis_y + 13}" font-size="9" text-anchor="middle">{number(t, 2)}</text>'
        )
    if reference is not None and vmin <= reference <= vmax:
        xr = x_of(reference)
        parts.append(f'<line x1="{xr:.1f}" y1="{pad}" x2="{xr:.1f}" y2="{axis_y}" stroke="#555" '
                     f'stroke-dasharray="3"><title>{escape(reference_label)} {number(reference)}</title></line>')
        if all(abs(xr - x_of(t)) > 24 for t in (vmin, 0.0, vmax)):  # its tick label would sit on an axis label
            parts.append(f'<text x="{xr:.1f}" y="{axis_y + 13}" font-size="9" text-anchor="middle" fill="#555">'
                         f'{escape(reference_label)}</text>')
    parts.append(f'<text x="4" y="{height - 3}" font-size="10" fill="#555">{escape(title)}</text>')
    return _frame(width, height, "".join(parts), title, "bars")


def number(v: float, digits: int = 3) -> str:
    """A number for a table or chart: fixed point, scientific below 10**-digits, never '-0.000'."""
    if v != v:
        return "n/a"
    if v == 0:
        return "0"
    if abs(v) < 10 ** -digits:
        return f"{v:.1e}"
    text = f"{v:.{digits}f}"
    return text


def line_chart(series: dict[str, tuple[list[float], list[float]]], title: str, size: int = 280,
               diagonal: bool = True, background: list[tuple[list[float], list[float], str]] | None = None,
               xlabel: str = "false positive rate", ylabel: str = "true positive rate",
               colors: list[str] | None = None) -> str:
    """Lines on [0, 1] x [0, 1] (ROC curves), one colour per series (``colors``, else the palette
    by position), with ticks, axis labels and a legend; ``background`` curves (e.g. single folds)
    are drawn thin and faint underneath."""
    m, left = 30, 46
    inner = size - 2 * m
    parts = [f'<rect x="{left}" y="{m}" width="{inner}" height="{inner}" fill="none" stroke="#999"/>']
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        x, y = left + t * inner, m + (1 - t) * inner
        parts.append(f'<line x1="{x:.1f}" y1="{m + inner}" x2="{x:.1f}" y2="{m + inner + 4}" stroke="#999"/>')
        parts.append(f'<text x="{x:.1f}" y="{m + inner + 14}" font-size="9" text-anchor="middle">{t:g}</text>')
        parts.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#999"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 3:.1f}" font-size="9" text-anchor="end">{t:g}</text>')
    if diagonal:
        parts.append(
            f'<line x1="{left}" y1="{m + inner}" x2="{left + inner}" y2="{m}" stroke="#bbb" stroke-dasharray="4"/>'
        )

    def pts(xs, ys):
        return " ".join(f"{left + x * inner:.1f},{m + (1 - y) * inner:.1f}" for x, y in zip(xs, ys, strict=True))

    for xs, ys, color in background or []:
        parts.append(f'<polyline points="{pts(xs, ys)}" fill="none" stroke="{color}" stroke-width="0.8" '
                     'stroke-opacity="0.35"/>')
    for i, (name, (xs, ys)) in enumerate(series.items()):
        color = colors[i] if colors else PALETTE[i % len(PALETTE)]
        parts.append(f'<polyline points="{pts(xs, ys)}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        parts.append(f'<text x="{left + inner + 8}" y="{m + 12 + 14 * i}" font-size="11" fill="{color}">'
                     f'{escape(name)}</text>')
    parts.append(f'<text x="{left + inner / 2:.1f}" y="{size - 2}" font-size="10" text-anchor="middle" '
                 f'fill="#333">{escape(xlabel)}</text>')
    parts.append(f'<text x="12" y="{m + inner / 2:.1f}" font-size="10" text-anchor="middle" fill="#333" '
                 f'transform="rotate(-90 12 {m + inner / 2:.1f})">{escape(ylabel)}</text>')
    parts.append(f'<text x="4" y="{m - 10}" font-size="10" fill="#555">{escape(title)}</text>')
    width = max(left + inner + 8 + 8 * max((len(n) for n in series), default=6) + 10, 6 * len(title) + 8)
    return _frame(int(width), size + 6, "".join(parts), title)


def scatter(points: list[tuple[float, float, str]], title: str, xlabel: str, ylabel: str, size: int = 220,
            highlight: str | None = None, radius: float = 1.8, names: list[str] | None = None,
            label_below: int = 30) -> str:
    """Points coloured by group; ``highlight`` is drawn on top with a dark outline.

    Every point names itself (an SVG ``<title>``: its name from ``names`` and its group, shown on
    hover); with at most ``label_below`` named points each is also labelled beside it. Points
    stay inside the frame (inset by their radius); legend entries wrap onto further lines,
    never cut at the figure's edge.
    """
    import textwrap

    m = 28
    inner = size - 2 * m
    if not points:
        return _frame(size, size, '<text x="10" y="20" font-size="11">no data</text>', title)
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    sx, sy = max(x1 - x0, 1e-12), max(y1 - y0, 1e-12)
    inset = radius + 3
    span = inner - 2 * inset
    groups = sorted({p[2] for p in points if p[2] != highlight})
    colors = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}
    parts = [f'<rect x="{m}" y="{m}" width="{inner}" height="{inner}" fill="none" stroke="#ccc"/>']
    names = list(names) if names is not None else [None] * len(points)
    order = sorted(range(len(points)), key=lambda i: points[i][2] == highlight)
    labelled = names[0] is not None and len(points) <= label_below
    for i in order:
        x, y, g = points[i]
        cx, cy = m + inset + (x - x0) / sx * span, m + inset + (1 - (y - y0) / sy) * span
        tip = f"<title>{escape(str(names[i]))} ({escape(str(g))})</title>" if names[i] is not None else \
            f"<title>{escape(str(g))}</title>"
        if g == highlight:
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.6" fill="#000" fill-opacity="0.8">{tip}</circle>')
        else:
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius}" fill="{colors[g]}" fill-opacity="0.6">'
                         f'{tip}</circle>')
        if labelled:
            anchor = "end" if cx > m + inner / 2 else "start"
            dx = -radius - 1 if anchor == "end" else radius + 1
            parts.append(f'<text x="{cx + dx:.1f}" y="{cy - 1:.1f}" font-size="7" text-anchor="{anchor}" '
                         f'fill="#333">{escape(str(names[i]))}</text>')
    parts.append(f'<text x="{m}" y="{m - 8}" font-size="10">{escape(title)}</text>')
    shown = [(g, colors[g]) for g in groups[:8]] + ([(highlight, "#000")] if highlight else [])
    if len(groups) > 8:
        shown.append((f"... and {len(groups) - 8} more groups", "#555"))
    lines = []
    for g, color in shown:  # below the plot, wrapped to the figure's width: never cut
        wrapped = textwrap.wrap(str(g), width=max(12, (size - m) // 6)) or [""]
        lines += [(("&#9679; " if k == 0 else "&#160;&#160;&#160;") + escape(text), color)
                  for k, text in enumerate(wrapped)]
    for i, (text, color) in enumerate(lines):
        parts.append(f'<text x="{m}" y="{size + 12 * i + 4}" font-size="10" fill="{color}">{text}</text>')
    parts.append(
        f'<text x="{size - m}" y="{m + inner + 12}" font-size="9" text-anchor="end" fill="#555">{escape(xlabel)}</text>'
    )
    parts.append(f'<text x="{m - 4}" y="{m + 10}" font-size="9" text-anchor="end" fill="#555" '
                 f'transform="rotate(-90 {m - 4} {m + 10})">{escape(ylabel)}</text>')
    return _frame(size, size + 12 * len(lines) + 4, "".join(parts), title)


def heatmap(grid, rows: list[str], cols: list[str], title: str, cell: int = 11, counts: bool | None = None) -> str:
    """A plate-shaped grid of values (NaN cells blank), white to dark blue, with a colour scale
    under it labelled with the range; whole counts (``counts``, or every value whole) are shown
    as integers. Each cell names its well and value on hover."""
    import numpy as np

    grid = np.asarray(grid, float)
    finite = grid[np.isfinite(grid)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    span = max(hi - lo, 1e-12)
    if counts is None:
        counts = bool(finite.size) and bool(np.all(finite == np.round(finite)))
    show = (lambda v: f"{int(round(v)):,}") if counts else number
    left, top = 18, 26

    def fill(v: float) -> str:
        shade = int(235 - 200 * (v - lo) / span)
        return f"rgb({shade},{shade + 10 if shade < 245 else 255},255)"

    parts = [f'<text x="2" y="10" font-size="10">{escape(title)}</text>']
    for j, c in enumerate(cols):
        if j % 4 == 0 or len(cols) <= 12:
            parts.append(f'<text x="{left + j * cell + cell / 2:.1f}" y="{top - 3}" font-size="7" '
                         f'text-anchor="middle">{escape(c)}</text>')
    for i, r in enumerate(rows):
        parts.append(f'<text x="{left - 3}" y="{top + i * cell + cell * 0.75:.1f}" font-size="7" '
                     f'text-anchor="end">{escape(r)}</text>')
        for j in range(len(cols)):
            v = grid[i, j]
            if v == v:
                parts.append(f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell - 1}" height="{cell - 1}" '
                             f'fill="{fill(v)}"><title>{escape(r)}{escape(cols[j])}: {show(v)}</title></rect>')
    # the colour scale: five steps from the lowest to the highest value, labelled at both ends
    scale_y = top + len(rows) * cell + 6
    steps = 5 if hi > lo else 1
    for k in range(steps):
        v = lo + (hi - lo) * k / max(steps - 1, 1)
        parts.append(f'<rect x="{left + k * 14}" y="{scale_y}" width="14" height="8" fill="{fill(v)}"/>')
    parts.append(f'<text x="{left}" y="{scale_y + 18}" font-size="8">{show(lo)}</text>')
    if hi > lo:
        parts.append(f'<text x="{left + steps * 14}" y="{scale_y + 18}" font-size="8" text-anchor="end">'
                     f'{show(hi)}</text>')
    width = max(left + len(cols) * cell + 4, int(5.6 * len(title)) + 4, left + steps * 14 + 40)  # nothing cut off
    return _frame(width, scale_y + 24, "".join(parts), title)
