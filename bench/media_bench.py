"""Media parsers on the simulated web: time per document and share parsed as the truth says.

Renders every PDF, PNG and JPEG of a simulated web (``--hosts``, seed 1, version 0) and parses each
with ``crawl.parse.parse_document`` (the crawl's own dispatch: sniffing, then ``crawl.media``), best of
``--reps`` runs per document; the HTML pages of the same web, parsed in the same run, are the
baseline. A document is correct when every field the truth has for it matches (PDF: title, page count,
text, link set; image: format, width, height, EXIF date, camera make and model).
Single process. Run: ``.venv/bin/python bench/media_bench.py [--hosts 200] [--reps 3]``. Ends with::

    RESULT pdf_ms=… image_ms=… html_ms=… pdf_vs_html=… pdf_correct=…/… image_correct=…/…
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from crawl.parse import parse_document  # noqa: E402
from crawl.simweb import model as M  # noqa: E402
from crawl.simweb.render import Renderer  # noqa: E402
from crawl.simweb.truth import media_columns  # noqa: E402


def best_time(fn, reps: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--html-pages", type=int, default=300, help="HTML pages timed as the baseline")
    a = ap.parse_args()
    m = M.build(M.SimParams(seed=1, hosts=a.hosts, pages_per_host=50))
    r = Renderer(m)
    truth = media_columns(m, np.zeros(m.n_pages, np.int64)).items()
    cols = {k: v.to_pylist() for k, v in truth}
    times: dict[str, list[float]] = {"pdf": [], "image": [], "html": []}
    sizes: dict[str, list[int]] = {"pdf": [], "image": [], "html": []}
    right = {"pdf": 0, "image": 0}
    media_pages = np.flatnonzero(np.isin(m.page_type, [M.PDF, M.PNG, M.JPEG]) & (m.render_src == np.arange(m.n_pages)))
    for p in media_pages.tolist():
        rend = r.get(p, 0, m.params.epoch0)
        body, url = rend.a, m.url(p)
        dt, doc = best_time(lambda b=body, u=url, ct=rend.content_type: parse_document(
            u, b, {"Content-Type": ct}, 500), a.reps)
        if m.page_type[p] == M.PDF:
            kind = "pdf"
            ok = (doc.title == cols["pdf_title"][p] and doc.page_count == cols["pdf_pages"][p]
                  and doc.text == cols["pdf_text"][p] and {lk.url for lk in doc.links} == set(cols["pdf_links"][p]))
        else:
            kind = "image"
            img = doc.image
            ok = img is not None and (img.format, img.width, img.height, img.exif_datetime, img.camera_make,
                                      img.camera_model) == tuple(cols[k][p] for k in (
                "image_format", "image_width", "image_height", "exif_datetime", "camera_make", "camera_model"))
        times[kind].append(dt)
        sizes[kind].append(len(body))
        right[kind] += ok
    html = [p for p in range(m.n_pages) if m.page_type[p] in (M.HOME, M.ARTICLE) and m.render_src[p] == p]
    for p in html[:: max(1, len(html) // a.html_pages)][: a.html_pages]:
        rend = r.get(p, 0, m.params.epoch0)
        body, url = rend.body(1, m.params.epoch0), m.url(p)
        dt, _ = best_time(lambda b=body, u=url, ct=rend.content_type: parse_document(
            u, b, {"Content-Type": ct}, 500), a.reps)
        times["html"].append(dt)
        sizes["html"].append(len(body))
    for k in times:
        t = np.array(times[k]) * 1000
        print(f"{k:5s}: {len(t):4d} docs, median {np.median(sizes[k]) / 1024:6.1f} KiB, parse median "
              f"{np.median(t):7.3f} ms, p95 {np.percentile(t, 95):7.3f} ms, max {t.max():7.3f} ms")
    med = {k: float(np.median(v)) * 1000 for k, v in times.items()}
    n_pdf, n_img = len(times["pdf"]), len(times["image"])
    print(f"RESULT pdf_ms={med['pdf']:.3f} image_ms={med['image']:.3f} html_ms={med['html']:.3f} "
          f"pdf_vs_html={med['pdf'] / med['html']:.2f} pdf_correct={right['pdf']}/{n_pdf} "
          f"image_correct={right['image']}/{n_img}")


if __name__ == "__main__":
    main()
