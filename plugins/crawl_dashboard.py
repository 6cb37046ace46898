"""The crawl dashboard: HTML pages under ``/crawl/dashboard`` (mounted by plugins/crawl_api.py).

Pages (each needs read access to the ``recrawl`` DAG, like the crawl API's read endpoints
(plugins/crawl_auth.py); inside the Airflow UI the browser sends the ``_token`` cookie):

* ``/crawl/dashboard/``                        the crawls under the crawl root, with their last round;
* ``/crawl/dashboard/crawls/{id}``             per-round charts, CrawlDb status, next-round preview,
                                               freshness, top hosts (the same layout as the report file);
* ``/crawl/dashboard/crawls/{id}/hosts``       every host: pages, errors, backoffs, robots-denied, delay;
* ``/crawl/dashboard/crawls/{id}/queue``       what the next round will fetch, and why;
* ``/crawl/dashboard/crawls/{id}/page?url=``   a URL's capture history, with download links;
* ``/crawl/dashboard/crawls/{id}/body?url=&at=``  the stored body of one capture;
* ``/crawl/dashboard/crawls/{id}/reports/{n}`` the stored report file of round n.

Errors: these are pages, so a 4xx on them (unknown crawl or round, bad input, no login) is an HTML
page in the dashboard's style with the specific reason and links back (:func:`error_page`, installed
as the crawl app's exception handler by plugins/crawl_api.py); a client that asks for JSON only
(``Accept: application/json``) gets FastAPI's JSON ``{"detail": ...}`` with the same status.

The figures come from :mod:`crawl.report` (DuckDB over the published output), the HTML from
:mod:`crawl.reporthtml`; this module only routes, checks input and links to the Airflow UI (DAG runs
open in the top window, not in the plugin's iframe). Charts are SVG made on the server: the pages
load nothing from elsewhere. A published round never changes, so the overview of a crawl is cached
until its next round is published.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from functools import lru_cache
from http import HTTPStatus
from typing import Annotated, Any

from crawl_auth import CAN_READ
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi import Path as FastApiPath
from fastapi.responses import HTMLResponse, Response

from crawl.config import CRAWL_ID_RE

# every page needs read access to the recrawl DAG, as the crawl API's read endpoints do
router = APIRouter(dependencies=[CAN_READ])
#: how long the crawl page waits for an external Dask scheduler's dashboard to answer before it leaves the link out
DASK_PROBE_TIMEOUT_S = 2.0


class _Refuse(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx answers the probe; it is not a hop to follow elsewhere


#: the dashboard probe's opener: no proxies from the environment, no redirects followed
_NO_REDIRECTS = urllib.request.build_opener(urllib.request.ProxyHandler({}), _Refuse())
#: a round number in a URL: digits only (no sign), at most 9 of them
ROUND_RE = re.compile(r"[0-9]{1,9}")
HOST_SORT_LABELS = {"pages": "pages fetched", "errors": "errors", "backoff": "backoffs",
                    "robots_denied": "robots-denied URLs", "delay_s": "delay", "known": "known URLs"}


def _root(request: Request) -> str:
    """The crawl root, by the rule of the app that mounts this router (``app.state.crawl_root``)."""
    return request.app.state.crawl_root()


def _links(request: Request) -> Any:
    """Links under this app's mount point (``/crawl`` on the API server, whatever proxy prefix)."""
    from crawl.reporthtml import Links

    root_path = request.scope.get("root_path", "").rstrip("/")
    return Links(prefix=f"{root_path}/dashboard", airflow_base=re.sub(r"/crawl$", "", root_path))


def _crawl_or_404(request: Request, crawl_id: str) -> int:
    """The crawl's published round; 400 for a malformed id, 404 for an unknown crawl."""
    from crawl.store import Store

    if not CRAWL_ID_RE.match(crawl_id):
        raise HTTPException(400, f"crawl_id must match {CRAWL_ID_RE.pattern}")
    store = Store(_root(request), crawl_id)
    if not store.ls(store.state()):
        raise HTTPException(404, f"unknown crawl {crawl_id!r}")
    return store.current_round()


def _page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    from crawl.reporthtml import render

    return HTMLResponse(render(template, **context), status_code=status)


@router.get("/", response_class=HTMLResponse)
def crawls_page(request: Request) -> HTMLResponse:
    from crawl import api, report

    root = _root(request)
    links = _links(request)
    rows = []
    for cid in api.list_crawls(root):
        row = report.crawl_overview(root, cid)
        if row["report"]:
            row["report"] = f"{links.crawl(cid)}/reports/{row['report']}"
        rows.append(row)
    return _page("crawls.html", crawls=rows, root=root, links=links)


@lru_cache(maxsize=16)
def _overview_html(root: str, crawl_id: str, round_no: int, has_origin: bool, prefix: str, airflow_base: str,
                   dask: tuple[str | None, str] | None) -> str:
    """The per-crawl page; cached per published round (has_origin: the report task has linked its run)
    and per Dask dashboard verdict (:func:`dask_dashboard`: it changes when a scheduler stops)."""
    from crawl import report
    from crawl.reporthtml import Links, render_report

    r = report.build(root, crawl_id, round_no)
    return render_report(r, links=Links(prefix=prefix, airflow_base=airflow_base), dask=dask)


def dask_dashboard(store: Any, round_no: int) -> tuple[str | None, str] | None:
    """(link, note) for the "Dask dashboard" of the crawl page: a link only to a dashboard that answers now.

    The round ran either on the embedded LocalCluster, which lives only during that round's fetch step
    (its dashboard is gone before the round is published: never a link, a note says why), or on an
    external scheduler (``dask_address``, long-lived): its dashboard is linked when it answers an HTTP
    GET within ``DASK_PROBE_TIMEOUT_S`` from this server, else a note names the scheduler."""
    if round_no < 1:
        return None
    fp = store.read_json(store.round_dir(round_no, "fetch_parse.json"), {}) or {}
    config = (store.read_json(store.round_dir(round_no, "manifest.json"), {}) or {}).get("config") or {}
    address = str(config.get("dask_address") or "")
    link = str(fp.get("dask_dashboard") or "")
    if not address:
        return None, ("Dask dashboard: none to open (embedded cluster: it runs only during a round's fetch step; "
                      "a long-lived scheduler, CRAWL_DASK_ADDRESS, keeps one)")
    if not link.startswith(("http://", "https://")):
        return None, f"Dask dashboard: the scheduler at {address} serves none"
    if urllib.parse.urlsplit(link).hostname != urllib.parse.urlsplit(address).hostname:
        # the server GETs this URL: only the scheduler's own host, never a URL a stored file names elsewhere
        return None, f"Dask dashboard: {link} is not on the scheduler's host ({address}); not probed"
    try:
        with _NO_REDIRECTS.open(urllib.request.Request(link, method="GET"), timeout=DASK_PROBE_TIMEOUT_S) as resp:
            ok = resp.status < 400
    except urllib.error.HTTPError as e:  # a 3xx not followed is an answer too
        ok = e.code < 400
    except (OSError, ValueError):
        ok = False
    if ok:
        return link, f"the Dask dashboard of the scheduler at {address}"
    return None, f"Dask dashboard: {link} (scheduler {address}) does not answer now"


@router.get("/crawls/{crawl_id}", response_class=HTMLResponse)
def crawl_page(crawl_id: str, request: Request) -> HTMLResponse:
    from crawl.store import Store

    n = _crawl_or_404(request, crawl_id)
    links = _links(request)
    store = Store(_root(request), crawl_id)
    has_origin = n > 0 and store.exists(store.round_dir(n, "airflow.json"))
    return HTMLResponse(_overview_html(_root(request), crawl_id, n, has_origin, links.prefix, links.airflow_base,
                                       dask_dashboard(store, n)))


@router.get("/crawls/{crawl_id}/hosts", response_class=HTMLResponse)
def hosts_page(crawl_id: str, request: Request,
               sort: Annotated[str, Query()] = "pages",
               limit: Annotated[int, Query(ge=1, le=5000)] = 200) -> HTMLResponse:
    from crawl import charts, report

    if sort not in report.HOST_SORTS:
        raise HTTPException(400, f"sort must be one of {', '.join(report.HOST_SORTS)}")
    n = _crawl_or_404(request, crawl_id)
    view = report.open_view(_root(request), crawl_id, n)
    rows = report.hosts(view, limit, sort)
    top = rows[:15]
    svg = charts.hbars(f"Top hosts by {HOST_SORT_LABELS[sort]}", [h["host"] for h in top],
                       [(HOST_SORT_LABELS[sort], [h[sort] or 0 for h in top], "blue")])
    return _page("hosts.html", cid=crawl_id, tab="hosts", links=_links(request), rows=rows, sort=sort,
                 sort_label=HOST_SORT_LABELS[sort], sorts=list(HOST_SORT_LABELS.items()), chart=svg,
                 total=report.host_count(view), round_no=n)


@router.get("/crawls/{crawl_id}/queue", response_class=HTMLResponse)
def queue_page(crawl_id: str, request: Request,
               limit: Annotated[int, Query(ge=1, le=5000)] = 50) -> HTMLResponse:
    from crawl import report

    n = _crawl_or_404(request, crawl_id)
    view = report.open_view(_root(request), crawl_id, n)
    settings = view.step(n, "manifest").get("config") or {}
    budget = {k: settings[k] for k in ("max_pages", "coverage_share") if k in settings} or None
    if budget and len(budget) < 2:
        budget = None
    return _page("queue.html", cid=crawl_id, tab="queue", links=_links(request), q=report.queue(view, limit),
                 round_no=n, budget=budget)


@router.get("/crawls/{crawl_id}/page", response_class=HTMLResponse)
def lookup_page(crawl_id: str, request: Request,
                url: Annotated[str | None, Query(max_length=8192)] = None) -> HTMLResponse:
    from crawl import report

    n = _crawl_or_404(request, crawl_id)
    ctx: dict[str, Any] = {"cid": crawl_id, "tab": "lookup", "links": _links(request), "asked": url, "h": None,
                           "error": None}
    if not url or not url.strip():
        return _page("lookup.html", **ctx)
    try:
        ctx["h"] = report.capture_history(report.open_view(_root(request), crawl_id, n), url.strip())
    except ValueError as exc:
        ctx["error"] = str(exc)
        return _page("lookup.html", status=400, **ctx)
    return _page("lookup.html", **ctx)


@router.get("/crawls/{crawl_id}/body")
def body_download(crawl_id: str, request: Request, url: Annotated[str, Query(min_length=1, max_length=8192)],
                  at: Annotated[str, Query(min_length=1, max_length=64)]) -> Response:
    """The stored body of the capture of ``url`` at ``at`` (a revisit or 304 gets the body it points to)."""
    from crawl import report

    n = _crawl_or_404(request, crawl_id)
    try:
        cap, payload = report.capture_body(report.open_view(_root(request), crawl_id, n), url, at)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from exc
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from exc
    return Response(payload, media_type=str(cap.get("content_mime_type") or "application/octet-stream"), headers={
        "X-Capture-Url": cap["url"], "X-Capture-Time": str(cap["fetch_time"]),
        "X-Content-Digest": str(cap.get("content_digest") or ""),
        # a download, never rendered on the Airflow origin: the crawl API's rule for stored bodies
        **request.app.state.download_headers({"crawl_id": crawl_id, **cap}),
    })


def round_or_400(value: str) -> int:
    """A round number from a URL: a whole number from 1 up, else 400 naming the value (never a path made of it)."""
    if not ROUND_RE.fullmatch(value) or int(value) < 1:
        raise HTTPException(400, f"round must be a whole number from 1 up to 999999999 (rounds count from 1), got {value!r}")
    return int(value)


@router.get("/crawls/{crawl_id}/reports/{round_no}", response_class=HTMLResponse)
def report_file(crawl_id: str, request: Request,
                round_no: Annotated[str, FastApiPath(description="round number: 1, 2, ...")]) -> HTMLResponse:
    """The report file the report task wrote for round ``round_no`` (as it was written)."""
    from crawl.report import report_path
    from crawl.store import Store

    if not CRAWL_ID_RE.match(crawl_id):
        raise HTTPException(400, f"crawl_id must match {CRAWL_ID_RE.pattern}")
    n = round_or_400(round_no)
    last = _crawl_or_404(request, crawl_id)
    store = Store(_root(request), crawl_id)
    rel = report_path(store, n)
    if not store.exists(rel):
        published = f"its published rounds are 1 to {last}" if last else "it has not published a round yet"
        raise HTTPException(404, f"no report file for round {n} of {crawl_id!r} ({published}; looked for {rel})")
    return HTMLResponse(store.read_bytes(rel).decode("utf-8"))


# ---- errors as pages -------------------------------------------------------------------------------------
def wants_json(request: Request) -> bool:
    """A client that asks for JSON and not HTML (``Accept: application/json``); browsers send text/html."""
    accept = request.headers.get("accept", "").lower()
    return "json" in accept and "text/html" not in accept


def _crawl_of(request: Request) -> str | None:
    """The crawl a dashboard URL names, when it is a crawl that exists (for a link back to it)."""
    from crawl.store import Store

    m = re.search(r"/dashboard/crawls/([^/]+)", request.url.path)
    if not m or not CRAWL_ID_RE.match(m.group(1)):
        return None
    try:
        store = Store(_root(request), m.group(1))
        return m.group(1) if store.ls(store.state()) else None
    except Exception:  # noqa: BLE001 - a link back is a nicety; the error page must render anyway
        return None


def error_message(detail: Any) -> str:
    """The text of an HTTPException's detail (a string, or a dict with a message) or of validation errors."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, dict) and "message" in detail:
        return str(detail["message"])
    if isinstance(detail, list | tuple):  # RequestValidationError.errors()
        parts = []
        for e in detail:
            loc = [str(x) for x in e.get("loc", ())]
            where = f"{loc[0]} parameter {'.'.join(loc[1:])!r}" if len(loc) > 1 else ".".join(loc)
            got = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""
            parts.append(f"{where}: {e.get('msg', 'invalid')}{got}")
        return "; ".join(parts)
    return str(detail)


def error_page(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> HTMLResponse:
    """An error as a page of the dashboard: the reason, and links back to the crawl list and the crawl."""
    links = _links(request)
    cid = None if status in (401, 403) else _crawl_of(request)  # no crawl names for a caller who may not read
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    login = None
    if status == 401:
        login = f"{links.airflow_base}/auth/login?next={urllib.parse.quote(str(request.url.path), safe='/')}"
    body = _page("error.html", status=status, cid=cid, links=links, code=status, phrase=phrase, message=message,
                 login=login)
    for k, v in (headers or {}).items():
        body.headers[k] = v
    return body
