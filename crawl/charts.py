"""Small charts as inline SVG strings, written directly (no browser-side library, no CDN, no plotting stack).

Why SVG by hand: the report and the dashboard show three kinds of chart only -- vertical bars
(stacked or side by side), lines with markers, horizontal bars with totals -- and drawing them with
matplotlib cost ~40 ms of CPU per chart (a figure, two layout passes for the tight bounding box, the
SVG backend) plus ~0.3 s to import it: ~0.6 s of every round's report, paid between two rounds of a
``crawl run`` while the workers wait (bench/RESULTS.md, "Fixed work of a crawl run"). Written here a
chart takes well under a millisecond. The style is Airflow's, as before: neutral greys, one accent
colour per series, light grid lines at round values, a one-row legend above the plot, no chart junk.
Text stays text (labels take the page's font, ``svg.chart text`` in the templates) and is escaped
(hosts and statuses come from the web). Each function returns one ``<svg>`` element with no ids (so
any number of charts can share a page) at its natural size (CSS may shrink it: ``max-width: 100%``);
a ``<title>`` names it for screen readers and tests.

Pure functions of their arguments: safe from the API server's worker threads.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

# Airflow 3 UI (Chakra) tones: text, muted text, grid, and series colours
TEXT = "#1a202c"
MUTED = "#718096"
GRID = "#e2e8f0"
COLORS = {
    "blue": "#3182ce", "green": "#38a169", "red": "#e53e3e", "orange": "#dd6b20", "yellow": "#d69e2e",
    "purple": "#805ad5", "teal": "#319795", "gray": "#a0aec0", "pink": "#d53f8c", "cyan": "#00a3c4",
}
PALETTE = ("blue", "orange", "purple", "teal", "pink", "yellow", "cyan", "gray")
#: Size in points (1/72 in; the page's CSS may shrink a chart): about what the matplotlib charts measured
#: before (a 5.6 x 2.4 in figure cropped to its content). Coordinates inside are in the same points.
WIDTH, HEIGHT = 350.0, 178.0
HBAR_PLOT_W = 316.0  # a horizontal-bar chart's plot width; its labels widen the chart on the left
FONT, SMALL = 9, 8  # px: tick and axis labels; legend and bar totals
CHAR_W = 0.62  # a label's width per character, in font sizes (sans-serif digits and capitals; margins only)
LEGEND_H = 16.0
MIN_SLOTS = 6  # a young crawl's few rounds keep a bar's width, the rest of the axis waits for more
MAX_X_LABELS = 12


def color(name: str) -> str:
    return COLORS.get(name, name)


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _f(v: float) -> str:
    """A coordinate: two decimals at most, no trailing zeros."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


def _text_w(text: str, size: float = FONT) -> float:
    return len(text) * size * CHAR_W


def nice_ticks(top: float, nbins: int = 4, integer: bool = False) -> list[float]:
    """Round tick values from 0 up to at most ``top`` (at least two), ``nbins`` intervals at most: steps of
    1, 2, 2.5 or 5 times a power of ten (whole numbers only with ``integer``), as matplotlib's MaxNLocator."""
    if not top > 0 or not math.isfinite(top):
        top = 1.0
    raw = top / nbins
    mag = 10.0 ** math.floor(math.log10(raw))
    step = mag * 10
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        s = m * mag
        if integer and (s < 1 or abs(s - round(s)) > 1e-9):
            continue
        if s >= raw * (1 - 1e-9):
            step = s
            break
    if integer:
        step = max(1.0, round(step))
    n = int(math.floor(top / step + 1e-9))
    return [i * step for i in range(max(n, 1) + 1)]


def _tick_labels(ticks: Sequence[float], percent: bool = False) -> list[str]:
    """Tick values with as many decimals as their step needs (0.25 -> 2, 0.5 -> 1, 200 -> 0)."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = 0
    while decimals < 8 and abs(step * 10**decimals - round(step * 10**decimals)) > 1e-6 * 10**decimals:
        decimals += 1
    return [f"{t:.{decimals}f}" + ("%" if percent else "") for t in ticks]


class _Svg:
    """One chart's SVG element, built as a list of strings."""

    def __init__(self, title: str, width: float, height: float) -> None:
        self.title, self.width, self.height = title, width, height
        self.parts: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, fill: str) -> None:
        if w > 0 and h > 0:
            self.parts.append(f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}" fill="{fill}"/>')

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 0.8) -> None:
        self.parts.append(f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" stroke="{stroke}" '
                          f'stroke-width="{_f(width)}"/>')

    def text(self, x: float, y: float, s: str, anchor: str = "middle", fill: str = MUTED, size: float = FONT,
             rotate: bool = False) -> None:
        turn = f' transform="rotate(-90 {_f(x)} {_f(y)})"' if rotate else ""
        self.parts.append(f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" fill="{fill}" '
                          f'style="font-size:{_f(size)}px"{turn}>{_esc(s)}</text>')

    def legend(self, names: Sequence[tuple[str, str]], x0: float) -> None:
        """One row above the plot (only for two or more series), so every chart keeps its plot width."""
        if len(names) < 2:
            return
        x = x0
        self.parts.append('<g class="legend">')
        for name, col in names:
            self.rect(x, 4, SMALL, SMALL, color(col))
            self.text(x + SMALL + 3, 4 + SMALL - 0.5, name, "start", TEXT, SMALL)
            x += SMALL + 3 + _text_w(name, SMALL) + 12
        self.parts.append("</g>")

    def done(self) -> str:
        label = _esc(self.title)
        return (f'<svg class="chart" role="img" aria-label="{label}" width="{_f(self.width)}pt" '
                f'height="{_f(self.height)}pt" viewBox="0 0 {_f(self.width)} {_f(self.height)}" '
                f'xmlns="http://www.w3.org/2000/svg"><title>{label}</title>' + "".join(self.parts) + "</svg>")


def _vertical_frame(svg: _Svg, x_labels: Sequence[str], ticks: Sequence[float], ylim: float, n_series: int,
                    xlabel: str, ylabel: str, percent: bool = False):  # type: ignore[no-untyped-def]
    """Axes of a chart with rounds along x: grid, tick labels, axis labels. Returns the x of a slot and the
    y of a value (functions) and the plot's left, right, top and bottom edges."""
    labels = _tick_labels(ticks, percent)
    left = max(_text_w(s) for s in labels) + 6 + (FONT + 6 if ylabel else 0)
    top = 6 + (LEGEND_H if n_series > 1 else 0)
    bottom = svg.height - 14 - (FONT + 5 if xlabel else 0)
    right = svg.width - 4
    slots = max(len(x_labels), MIN_SLOTS)
    lo, hi = -0.6, slots - 0.4

    def xs(i: float) -> float:
        return left + (i - lo) / (hi - lo) * (right - left)

    def ys(v: float) -> float:
        return bottom - (v / ylim) * (bottom - top) if ylim > 0 else bottom

    for t, s in zip(ticks, labels, strict=True):
        y = ys(t)
        svg.line(left, y, right, y, GRID)
        svg.text(left - 4, y + FONT * 0.35, s, "end")
    svg.line(left, bottom, right, bottom, GRID)
    step = max(1, -(-len(x_labels) // MAX_X_LABELS))
    for i in range(0, len(x_labels), step):
        svg.text(xs(i), bottom + FONT + 3, str(x_labels[i]))
    if xlabel:
        svg.text((left + right) / 2, svg.height - 3, xlabel)
    if ylabel:
        svg.text(FONT, (top + bottom) / 2, ylabel, rotate=True)
    return xs, ys, left, right, top, bottom


def bars(title: str, x_labels: Sequence[str], series: Sequence[tuple[str, Sequence[float], str]],
         stacked: bool = True, xlabel: str = "round", ylabel: str = "", integer: bool = True) -> str:
    """Vertical bars per x label; several series stack (or sit side by side with ``stacked=False``)."""
    n = len(x_labels)
    values = [[float(v or 0) for v in vals] for _, vals, _ in series]
    if stacked:
        top = max([sum(vs[i] for vs in values) for i in range(n)] + [0.0])
    else:
        top = max([v for vs in values for v in vs] + [0.0])
    empty = all(not any(vs) for vs in values)
    ticks = nice_ticks(1.0 if empty else top * 1.05, integer=integer)
    ylim = max(ticks[-1], top)
    svg = _Svg(title, WIDTH, HEIGHT)
    xs, ys, left, _right, top_y, bottom = _vertical_frame(svg, x_labels, ticks, ylim, len(series), xlabel, ylabel)
    unit = xs(1) - xs(0)
    k = max(len(series), 1)
    width = (0.7 if stacked else 0.8 / k) * unit
    base = [0.0] * n
    for j, ((_name, _vals, col), vs) in enumerate(zip(series, values, strict=True)):
        for i, v in enumerate(vs):
            if stacked:
                x = xs(i) - width / 2
                y0, y1 = ys(base[i]), ys(base[i] + v)
                base[i] += v
            else:
                x = xs(i) - 0.4 * unit + width * j
                y0, y1 = ys(0), ys(v)
            svg.rect(x, y1, width, y0 - y1, color(col))
    if empty:
        svg.text((left + svg.width - 4) / 2, (top_y + bottom) / 2 + FONT * 0.35, "none so far")
    svg.legend([(name, col) for name, _, col in series], left)
    return svg.done()


def lines(title: str, x_labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None], str]],
          xlabel: str = "round", ylabel: str = "", percent: bool = False) -> str:
    """Lines with markers per series (missing values leave gaps)."""
    scale = 100.0 if percent else 1.0
    values = [[None if v is None or v != v else float(v) * scale for v in vals] for _, vals, _ in series]
    top = max([v for vs in values for v in vs if v is not None] + [0.0])
    ylim = top * 1.15 if top > 0 else 1.0
    ticks = nice_ticks(ylim)
    svg = _Svg(title, WIDTH, HEIGHT)
    xs, ys, left, _right, _top, _bottom = _vertical_frame(svg, x_labels, ticks, ylim, len(series), xlabel, ylabel,
                                                          percent)
    for (_name, _vals, col), vs in zip(series, values, strict=True):
        c = color(col)
        run: list[str] = []
        for i, v in enumerate([*vs, None]):
            if v is not None:
                run.append(f"{_f(xs(i))},{_f(ys(v))}")
            elif run:
                if len(run) > 1:
                    svg.parts.append(f'<polyline points="{" ".join(run)}" fill="none" stroke="{c}" '
                                     f'stroke-width="1.8" stroke-linejoin="round"/>')
                run = []
        for i, v in enumerate(vs):
            if v is not None:
                svg.parts.append(f'<circle cx="{_f(xs(i))}" cy="{_f(ys(v))}" r="1.75" fill="{c}"/>')
    svg.legend([(name, col) for name, _, col in series], left)
    return svg.done()


def hbars(title: str, labels: Sequence[str], series: Sequence[tuple[str, Sequence[float], str]],
          xlabel: str = "") -> str:
    """Horizontal (stacked) bars, first label on top, with the total written after each bar."""
    n = len(labels)
    values = [[float(v or 0) for v in vals] for _, vals, _ in series]
    totals = [sum(vs[i] for vs in values) for i in range(n)]
    top = max([*totals, 0.0])
    xlim = top * 1.12 if top > 0 else 1.0
    ticks = nice_ticks(xlim, integer=True)
    ticks = [t for t in ticks if t <= xlim] or [0.0]
    height = max(1.2, 0.26 * n + 0.5) * 72
    left = max([_text_w(str(s)) for s in labels] + [0.0]) + 8
    right = left + HBAR_PLOT_W
    svg = _Svg(title, right + 4, height)
    top_y = 6 + (LEGEND_H if len(series) > 1 else 0)
    bottom = height - 14 - (FONT + 5 if xlabel else 0)

    def xs(v: float) -> float:
        return left + v / xlim * (right - left)

    row = (bottom - top_y) / max(n, 1)
    for t, s in zip(ticks, _tick_labels(ticks), strict=True):
        svg.line(xs(t), top_y, xs(t), bottom, GRID)
        svg.text(xs(t), bottom + FONT + 3, s)
    if xlabel:
        svg.text((left + right) / 2, height - 3, xlabel)
    for i, label in enumerate(labels):
        yc = top_y + (i + 0.5) * row
        svg.text(left - 4, yc + FONT * 0.35, str(label), "end", TEXT)
        x = 0.0
        for (_name, _vals, col), vs in zip(series, values, strict=True):
            svg.rect(xs(x), yc - 0.34 * row, xs(x + vs[i]) - xs(x), 0.68 * row, color(col))
            x += vs[i]
        svg.text(xs(totals[i]) + top / xlim * 0.01 * (right - left) + 2, yc + SMALL * 0.35, f"{totals[i]:,.0f}",
                 "start", TEXT, SMALL)
    svg.legend([(name, col) for name, _, col in series], left)
    return svg.done()


__all__ = ["COLORS", "PALETTE", "bars", "color", "hbars", "lines", "nice_ticks"]
