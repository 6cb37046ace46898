"""The report's SVG charts (crawl.charts), read back with an XML parser: every value drawn to scale, labels
escaped, one well-formed <svg> per chart with its title, no ids to collide on a shared page."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawl import charts

NS = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg" and "chart" in root.attrib["class"].split()
    return root


def _rects(root: ET.Element, fill: str) -> list[dict[str, float]]:
    """The bars of one colour (the legend's swatches left out)."""
    legend = {id(r) for g in root.iter(f"{NS}g") if g.attrib.get("class") == "legend" for r in g.iter(f"{NS}rect")}
    return [{k: float(r.attrib[k]) for k in ("x", "y", "width", "height")}
            for r in root.iter(f"{NS}rect") if r.attrib["fill"] == fill and id(r) not in legend]


def _legend(root: ET.Element) -> list[str]:
    return [t.text or "" for g in root.iter(f"{NS}g") if g.attrib.get("class") == "legend" for t in g.iter(f"{NS}text")]


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text")]


def test_stacked_bars_are_drawn_to_scale_with_legend_and_title() -> None:
    fetched, errors = [170, 1928, 1932], [3, 40, 0]
    svg = charts.bars("Pages <per> round", ["1", "2", "3"], [("fetched", fetched, "green"), ("errors", errors, "red")])
    root = _parse(svg)
    assert root.find(f"{NS}title").text == "Pages <per> round" == root.attrib["aria-label"]
    assert "id=" not in svg
    green, red = _rects(root, charts.COLORS["green"]), _rects(root, charts.COLORS["red"])
    assert len(green) == 3 and len(red) == 2  # no bar for a 0
    bars = red
    scale = green[0]["height"] / fetched[0]
    for r, v in zip(green, fetched, strict=True):
        assert r["height"] == pytest.approx(v * scale, abs=0.02)
    for r, v in zip(bars, [e for e in errors if e], strict=True):
        assert r["height"] == pytest.approx(v * scale, abs=0.02)
    # stacked: each error bar sits on its round's fetched bar
    assert bars[0]["y"] + bars[0]["height"] == pytest.approx(green[0]["y"], abs=0.02)
    assert bars[0]["x"] == pytest.approx(green[0]["x"])
    assert _legend(root) == ["fetched", "errors"]
    assert {"round", "1", "2", "3"} <= set(_texts(root))
    assert not _legend(_parse(charts.bars("one", ["1"], [("fetched", [1], "green")])))  # one series: no legend


def test_side_by_side_bars_share_the_slot() -> None:
    root = _parse(charts.bars("x", ["1", "2"], [("a", [4, 2], "blue"), ("b", [1, 8], "orange")], stacked=False))
    a, b = _rects(root, charts.COLORS["blue"])[:2], _rects(root, charts.COLORS["orange"])[:2]
    assert a[0]["x"] < b[0]["x"] < a[1]["x"] < b[1]["x"]
    scale = a[0]["height"] / 4
    assert [r["height"] / scale for r in (*a, *b)] == pytest.approx([4, 2, 1, 8], abs=0.01)
    # the same baseline
    assert {round(r["y"] + r["height"], 2) for r in (*a, *b)} == {round(a[0]["y"] + a[0]["height"], 2)}


def test_an_all_zero_chart_says_none_so_far() -> None:
    root = _parse(charts.bars("Errors", ["1", "2"], [("errors", [0, 0], "red")]))
    assert "none so far" in _texts(root)
    assert not _rects(root, charts.COLORS["red"])


def test_lines_leave_gaps_for_missing_values_and_format_percent() -> None:
    root = _parse(charts.lines("Stale", ["1", "2", "3", "4"], [("stale", [0.1, None, 0.25, 0.3], "red")],
                               percent=True))
    circles = list(root.iter(f"{NS}circle"))
    assert len(circles) == 3
    polylines = [p.attrib["points"].split() for p in root.iter(f"{NS}polyline")]
    assert [len(p) for p in polylines] == [2]  # 0.25 -> 0.3; 0.1 stands alone (a gap for round 2)
    ys = [float(c.attrib["cy"]) for c in circles]
    base = max(float(ln.attrib["y1"]) for ln in root.iter(f"{NS}line"))  # the x axis
    assert [(base - y) for y in ys] == pytest.approx([(base - ys[0]) / 10 * v for v in (10, 25, 30)], abs=0.02)
    labels = [t for t in _texts(root) if t.endswith("%")]
    assert labels and all(float(t[:-1]) <= 30 * 1.15 for t in labels) and labels[0] in ("0%", "0.0%")


def test_hbars_write_each_total_and_escape_labels() -> None:
    hosts = ["a.example", "<b>.example", "c.example"]
    pages, backoffs = [1200, 30, 0], [5, 0, 7]
    root = _parse(charts.hbars("Top hosts", hosts, [("pages", pages, "green"), ("backoffs", backoffs, "orange")]))
    texts = _texts(root)
    assert hosts[1] in texts  # parsed back: it was escaped in the SVG
    for total in ("1,205", "30", "7"):
        assert total in texts
    green = _rects(root, charts.COLORS["green"])[:2]
    assert green[0]["y"] < green[1]["y"]  # first label on top
    assert green[1]["width"] / green[0]["width"] == pytest.approx(30 / 1200, rel=1e-3)


def test_charts_on_one_page_have_no_ids() -> None:
    page = charts.bars("a", ["1"], [("x", [1], "blue")]) + charts.hbars("b", ["h"], [("y", [2], "teal")])
    assert " id=" not in page


@settings(max_examples=300, deadline=None)
@given(top=st.floats(min_value=1e-9, max_value=1e12, allow_nan=False), integer=st.booleans())
def test_nice_ticks_are_round_evenly_spaced_and_cover_the_range(top: float, integer: bool) -> None:
    ticks = charts.nice_ticks(top, nbins=4, integer=integer)
    assert ticks[0] == 0 and 2 <= len(ticks) <= 5
    step = ticks[1] - ticks[0]
    assert all(b - a == pytest.approx(step) for a, b in zip(ticks, ticks[1:], strict=False))
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-12)
    assert any(mantissa == pytest.approx(m) for m in (1, 2, 2.5, 5, 10))
    if integer:
        assert step >= 1 and step == int(step)
    if not integer or top >= 4:
        assert ticks[-1] <= top * (1 + 1e-9) and ticks[-1] + step > top  # the last round value under the top
