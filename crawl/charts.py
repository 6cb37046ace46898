"""Small charts as inline SVG strings, drawn server-side with matplotlib (no browser-side library, no CDN).

Why matplotlib: it is already a dependency (benchmark plots), draws on any machine without a display,
and its SVG backend keeps text as text (``svg.fonttype = none``), so labels take the page's system
font and stay sharp at any width. The style is Airflow's: neutral greys, one accent colour per
series, light horizontal grid, no chart junk. Each function returns one ``<svg>`` element (no XML
prolog, ids unique on the page) at its natural size (CSS may shrink it: ``max-width: 100%``); a
``<title>`` names it for screen readers and tests.

Figures are built with the object API (``matplotlib.figure.Figure``), never pyplot, so rendering holds
no global state and is safe from the API server's worker threads (the lock guards rcParams).
"""

from __future__ import annotations

import html
import io
import itertools
import re
import threading
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
_LOCK = threading.Lock()
_IDS = itertools.count(1)
_RC = {
    "svg.fonttype": "none", "svg.hashsalt": "crawl-report", "font.size": 9, "font.family": "sans-serif",
    "axes.edgecolor": GRID, "axes.labelcolor": MUTED, "xtick.color": MUTED, "ytick.color": MUTED,
    "axes.spines.top": False, "axes.spines.right": False, "axes.spines.left": False,
    "axes.grid": True, "axes.grid.axis": "y", "grid.color": GRID, "grid.linewidth": 0.8,
    "axes.axisbelow": True, "legend.frameon": False, "legend.fontsize": 8,
    "xtick.major.size": 0, "ytick.major.size": 0,
}
_FONT_RE = re.compile(r"font-family:[^;\"]*;?|font: ?([0-9]+ )?([0-9.]+px) '?[^;\"']*'?")
WIDTH_IN, HEIGHT_IN = 5.6, 2.4


def color(name: str) -> str:
    return COLORS.get(name, name)


def _figure(height: float = HEIGHT_IN, width: float = WIDTH_IN):  # type: ignore[no-untyped-def]
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=72)
    fig.patch.set_alpha(0)
    return fig, fig.add_subplot(1, 1, 1)


def _svg(fig, title: str) -> str:  # type: ignore[no-untyped-def]
    for ax in fig.axes:
        ax.set_facecolor("none")
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight", pad_inches=0.05)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, count=1, flags=re.S)
    # several charts share one HTML page: make every id (and reference to it) unique to this chart
    prefix = f"c{next(_IDS)}-"
    svg = re.sub(r'(\bid="|url\(#|href="#)', lambda m: m.group(1) + prefix, svg)
    # the page's font, not a font name baked into every label
    svg = _FONT_RE.sub(lambda m: f"font-size:{m.group(2)};" if m.group(2) else "", svg)
    label = html.escape(title, quote=True)
    svg = svg.replace("<svg ", '<svg class="chart" role="img" ', 1)
    svg = svg.replace(">", f' aria-label="{label}"><title>{label}</title>', 1)
    return svg


def _int_axis(ax) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True, min_n_ticks=2))


MIN_SLOTS = 6  # a young crawl's few rounds keep a bar's width, the rest of the axis waits for more


def _x_ticks(ax, labels: Sequence[str]) -> None:  # type: ignore[no-untyped-def]
    n = len(labels)
    step = max(1, -(-n // 12))  # at most ~12 labels
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [labels[i] for i in ticks])
    ax.set_xlim(-0.6, max(n, MIN_SLOTS) - 0.4)


def _none_yet(ax, empty: bool) -> None:  # type: ignore[no-untyped-def]
    if empty:
        ax.text(0.5, 0.5, "none so far", transform=ax.transAxes, ha="center", va="center", color=MUTED)


def bars(title: str, x_labels: Sequence[str], series: Sequence[tuple[str, Sequence[float], str]],
         stacked: bool = True, xlabel: str = "round", ylabel: str = "", integer: bool = True) -> str:
    """Vertical bars per x label; several series stack (or sit side by side with ``stacked=False``)."""
    with _LOCK:
        import matplotlib

        with matplotlib.rc_context(_RC):
            fig, ax = _figure()
            n = len(x_labels)
            xs = list(range(n))
            bottom = [0.0] * n
            k = max(len(series), 1)
            width = 0.7 if stacked else 0.8 / k
            for j, (name, values, col) in enumerate(series):
                vals = [float(v or 0) for v in values]
                if stacked:
                    ax.bar(xs, vals, width, bottom=bottom, label=name, color=color(col), linewidth=0)
                    bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
                else:
                    offs = [x - 0.4 + width * (j + 0.5) for x in xs]
                    ax.bar(offs, vals, width, label=name, color=color(col), linewidth=0)
            _x_ticks(ax, list(x_labels))
            if integer:
                _int_axis(ax)
            empty = all(not any(v for v in s[1]) for s in series)
            if empty:
                ax.set_ylim(0, 1)
            _none_yet(ax, empty)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            _legend(ax, len(series))
            return _svg(fig, title)


def lines(title: str, x_labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None], str]],
          xlabel: str = "round", ylabel: str = "", percent: bool = False) -> str:
    """Lines with markers per series (missing values leave gaps)."""
    with _LOCK:
        import matplotlib
        from matplotlib.ticker import MaxNLocator, PercentFormatter

        with matplotlib.rc_context(_RC):
            fig, ax = _figure()
            xs = list(range(len(x_labels)))
            top = 0.0
            for name, values, col in series:
                vals = [float("nan") if v is None else float(v) * (100 if percent else 1) for v in values]
                ax.plot(xs, vals, marker="o", markersize=3.5, linewidth=1.8, color=color(col), label=name)
                top = max([top, *[v for v in vals if v == v]])
            _x_ticks(ax, list(x_labels))
            ax.set_ylim(0, top * 1.15 if top > 0 else 1)
            ax.yaxis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))
            if percent:
                ax.yaxis.set_major_formatter(PercentFormatter(decimals=None))
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            _legend(ax, len(series))
            return _svg(fig, title)


def hbars(title: str, labels: Sequence[str], series: Sequence[tuple[str, Sequence[float], str]],
          xlabel: str = "") -> str:
    """Horizontal (stacked) bars, first label on top, with the total written after each bar."""
    with _LOCK:
        import matplotlib

        with matplotlib.rc_context({**_RC, "axes.grid.axis": "x", "axes.spines.bottom": False}):
            n = len(labels)
            fig, ax = _figure(height=max(1.2, 0.26 * n + 0.5))
            ys = list(range(n))[::-1]
            left = [0.0] * n
            for name, values, col in series:
                vals = [float(v or 0) for v in values]
                ax.barh(ys, vals, 0.68, left=left, label=name, color=color(col), linewidth=0)
                left = [a + v for a, v in zip(left, vals, strict=True)]
            top = max([*left, 0.0])
            for y, total in zip(ys, left, strict=True):
                ax.text(total + top * 0.01, y, f"{total:,.0f}", va="center", ha="left", color=TEXT, fontsize=8)
            ax.set_yticks(ys, list(labels))
            ax.set_xlim(0, top * 1.12 if top > 0 else 1)
            ax.set_ylim(-0.6, n - 0.4)
            ax.tick_params(axis="y", labelcolor=TEXT)
            _int_axis_x(ax)
            ax.set_xlabel(xlabel)
            _legend(ax, len(series))
            return _svg(fig, title)


def _legend(ax, n: int) -> None:  # type: ignore[no-untyped-def]
    """One row above the plot, so every chart keeps the same plot width."""
    if n > 1:
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=n, borderaxespad=0.0, handlelength=1.0,
                  handletextpad=0.4, columnspacing=1.2, labelcolor=TEXT)


def _int_axis_x(ax) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True, min_n_ticks=2))


__all__ = ["COLORS", "PALETTE", "bars", "color", "hbars", "lines"]
