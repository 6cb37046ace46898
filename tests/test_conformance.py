"""The public conformance suites (tests/data/conformance, see its SOURCES.md) against our adapters.

The harnesses are run as their authors ship them, in a subprocess from the repository root, and their
summary lines are asserted: the thresholds are the issue's "done when" goals, plus floors at today's
figures so a regression shows up.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = Path(os.environ.get("CONFORMANCE_DIR", ROOT / "tests" / "data" / "conformance"))
SUMMARY_RE = re.compile(r"^\[(\w+)\] (\d+) passed, (\d+) failed(?:, (\d+) skipped)?", re.M)
TOTAL_RE = re.compile(r"^(\d+) passed, (\d+) failed$", re.M)


def _run(script: str, *args: str) -> tuple[dict[str, tuple[int, int]], tuple[int, int], str]:
    assert (CONFORMANCE / script).is_file(), f"conformance data missing at {CONFORMANCE}"
    proc = subprocess.run(
        [sys.executable, str(CONFORMANCE / script), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )
    out = proc.stdout
    parts = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in SUMMARY_RE.finditer(out)}
    total = TOTAL_RE.findall(out)
    assert total, out + proc.stderr
    return parts, (int(total[-1][0]), int(total[-1][1])), out


def test_robots_google_and_spec_standard_cases_all_pass() -> None:
    parts, (passed, failed), out = _run(
        "check_robots.py", "--adapter", "crawl.robots:is_allowed", "--suite", "google,spec",
        "--standard-only", "-v")
    assert failed == 0, out
    assert parts["google"] == (56, 0) and parts["spec"] == (358, 0), out


def test_robots_all_suites_floor() -> None:
    parts, (passed, failed), out = _run(
        "check_robots.py", "--adapter", "crawl.robots:is_allowed", "--suite", "all")
    # 593/613 measured; the 20 failures are all flagged non-standard (Google-only or disputed).
    assert passed >= 593, out
    assert parts["other"] == (13, 0), out  # sitemaps, crawl-delay, request-rate hooks


@pytest.mark.parametrize("suite", ["google", "spec", "cpython"])
def test_robots_failures_are_only_nonstandard(suite: str) -> None:
    _, _, out = _run("check_robots.py", "--adapter", "crawl.robots:is_allowed", "--suite", suite)
    m = re.search(r"standard (\d+)/(\d+)", out.replace("non-standard", "nonstd"))
    assert m and m.group(1) == m.group(2), out


def test_url_resolution_at_least_95_percent() -> None:
    parts, (passed, failed), out = _run(
        "check_urls.py", "--resolve", "crawl.url:resolve", "--canon", "none", "-v")
    assert passed / (passed + failed) >= 0.95, out
    # measured 472/474: the two left are RFC 3986 answers WHATWG does differently ("g:h" is not
    # http(s); "//g" gets the path "/").
    assert passed >= 472, out
    assert "whatwg-failure 203/203" in out and "whatwg-success 229/229" in out, out


def test_canonicalisation_against_w3lib_count() -> None:
    parts, (passed, failed), out = _run(
        "check_urls.py", "--resolve", "none", "--canon", "crawl.url:canonicalize", "-v")
    # 48 of 65 runnable; each difference is a documented policy choice (crawl/url/canon.py docstring).
    # 4 of them (the userinfo cases) because canonical URLs drop userinfo, as issue 8 requires.
    assert passed >= 48, out
    assert "rfc3986 3/3" in out and "w3lib-idempotent 1/1" in out, out
