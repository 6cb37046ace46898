"""Crawl API: a FastAPI app mounted on the Airflow API server at ``/crawl``.

Endpoints (every one needs an Airflow login: ``Authorization: Bearer <token>`` or the UI's cookie,
and a permission on the ``recrawl`` DAG from Airflow's auth manager, see plugins/crawl_auth.py: reads
need read access to the DAG, starting a crawl needs the right to trigger it; the API reference
``/crawl/docs`` (also ``/crawl/redoc``) and the schema ``/crawl/openapi.json`` need a login):

* ``POST /crawl/crawls``            start a crawl: seeds are checked by the engine, then the ``recrawl``
                                    DAG is triggered with them; answers the crawl id and DAG run id.
* ``GET  /crawl/crawls``            the crawl ids under the crawl root.
* ``GET  /crawl/crawls/{crawl_id}`` counts (known, fetched, queued, failed, gone, duplicates), last round.
* ``GET  /crawl/pages?url=&crawl_id=[&body=1]``  the latest capture of a URL (canonicalised by the
                                    engine); ``body=1`` streams the stored payload as a download
                                    (never rendered on the Airflow origin: a crawled page's script
                                    would run as the logged-in user).
* ``GET  /crawl/summary``           a plain HTML table of all crawls (the UI's nav links the dashboard).
* ``GET  /crawl/dashboard/...``     the crawl dashboard (plugins/crawl_dashboard.py), linked in the UI's
                                    nav as "Crawls": charts per round, CrawlDb, queue, hosts, page lookup.

Errors: the JSON routes answer FastAPI's ``{"detail": ...}``; the HTML pages (dashboard, summary, API
reference) answer an HTML page with the same status and reason unless the client asks for JSON only.
The API reference (``/crawl/docs``) is rendered on the server from ``openapi()`` (plugins/crawl_apiref.py):
Swagger UI and ReDoc load their scripts from a CDN and stay blank without internet access.

How a run is triggered. The plugin calls the public REST API of the same server,
``POST /api/v2/dags/recrawl/dagRuns``, with the caller's own token. That is Airflow's stable,
documented interface (the route's implementation and ``airflow.api.common`` are internal and changed
between 3.x releases); it checks that *this* user may trigger the DAG (not just that they are logged
in), validates the conf against the DAG's Params with the same messages as the trigger form, and
records the user as the run's trigger. The server address is the socket this request came in on
(``RECRAWL_AIRFLOW_API_URL`` overrides it, e.g. behind a proxy).

The crawl root is ``CRAWL_ROOT``, else ``$AIRFLOW_HOME/crawldata`` — the same rule as dags/recrawl.py.
Engine calls (DuckDB, Parquet reads) block, so endpoints are plain ``def``: FastAPI runs them in its
thread pool and the server's event loop stays free.
"""

from __future__ import annotations

import html
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import crawl_dashboard  # plugins/ is on sys.path: Airflow puts its plugins folder there
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.plugins_manager import AirflowPlugin
from crawl_apiref import operations
from crawl_auth import CAN_READ, CAN_TRIGGER, DAG_ID, LOGGED_IN
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from pydantic import Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from crawl.config import CRAWL_ID_RE, is_crawl_id, request_model

CrawlId = Annotated[str, Field(pattern=CRAWL_ID_RE.pattern)]
BODY_CHUNK = 64 * 1024


def crawl_root() -> str:
    """``CRAWL_ROOT``, else ``$AIRFLOW_HOME/crawldata`` (same rule as the DAG)."""
    root = os.environ.get("CRAWL_ROOT")
    if root:
        return root
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return str(Path(home) / "crawldata")


# The trigger form's fields, derived from the one declaration (crawl.config.CrawlSettings): crawl id
# and seeds required, the other settings optional (omitted = the DAG's defaults and ``CRAWL_*`` env).
# ``dask_address`` is not a crawl setting but where to run it: only CRAWL_DASK_ADDRESS or the operator's
# allowlist is accepted (crawl.cluster.check_run_dask_address).
CrawlRequest = request_model(
    "CrawlRequest", "A crawl to start: the recrawl DAG's params (same names and bounds).",
    extra_fields={"dask_address": (str | None, Field(None, title="Dask scheduler address"))},
)


# FastAPI's own /docs, /redoc and /openapi.json answer anyone; the routes below serve them behind a login.
app = FastAPI(title="Crawl API", description=__doc__, docs_url=None, redoc_url=None, openapi_url=None)


def _mounted_at(request: Request) -> str:
    return str(request.scope.get("root_path") or "").rstrip("/")


@app.get("/openapi.json", include_in_schema=False, dependencies=[LOGGED_IN])
def openapi_schema(request: Request) -> dict[str, Any]:
    schema = dict(app.openapi())
    if _mounted_at(request):  # as FastAPI's own route does for a mounted app
        schema["servers"] = [{"url": _mounted_at(request)}]
    return schema


@app.get("/docs", include_in_schema=False, dependencies=[LOGGED_IN])
@app.get("/redoc", include_in_schema=False, dependencies=[LOGGED_IN])
def api_reference(request: Request) -> HTMLResponse:
    """The API reference, rendered here from ``openapi()``: no script, nothing loaded from elsewhere
    (FastAPI's Swagger UI and ReDoc pages load theirs from a CDN and are blank offline)."""
    from crawl.reporthtml import render

    spec = app.openapi()
    base = _mounted_at(request)
    return HTMLResponse(render(
        "apiref.html", title=app.title, version=spec.get("info", {}).get("version", ""),
        openapi_version=spec.get("openapi", ""), description=app.description or "", ops=operations(spec),
        base=base, schema_url=f"{base}/openapi.json", links=crawl_dashboard._links(request)))


# the app's HTML pages (under its mount point); an error on them is a page too
HTML_PAGES = ("/dashboard", "/summary", "/docs", "/redoc")


def _is_html_page(request: Request) -> bool:
    path = request.url.path
    mount = _mounted_at(request)
    if mount and path.startswith(mount):
        path = path[len(mount):]
    return any(path == p or path.startswith(p + "/") for p in HTML_PAGES)


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if _is_html_page(request) and not crawl_dashboard.wants_json(request):
        return crawl_dashboard.error_page(request, exc.status_code, crawl_dashboard.error_message(exc.detail),
                                          headers=getattr(exc, "headers", None))
    return await http_exception_handler(request, exc)


@app.exception_handler(RequestValidationError)
async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    if _is_html_page(request) and not crawl_dashboard.wants_json(request):
        return crawl_dashboard.error_page(request, 422, crawl_dashboard.error_message(exc.errors()))
    return await request_validation_exception_handler(request, exc)


def _caller_token(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.cookies.get("_token", "")


def _api_base(request: Request) -> str:
    configured = os.environ.get("RECRAWL_AIRFLOW_API_URL")
    if configured:
        return configured.rstrip("/")
    host, port = request.scope.get("server") or ("127.0.0.1", 8080)
    if host in ("0.0.0.0", "::", None):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _airflow_call(request: Request, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """Call the Airflow REST API on this server as the caller; returns (status, parsed JSON)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(_api_base(request) + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {_caller_token(request)}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, {"detail": raw.decode(errors="replace")}
    except OSError as exc:
        raise HTTPException(502, f"Airflow API at {_api_base(request)} not reachable: {exc}") from exc


@app.post("/crawls", status_code=201, dependencies=[CAN_TRIGGER])
def start_crawl(req: CrawlRequest, request: Request, user: GetUserDep) -> dict[str, Any]:
    """Validate the seeds with the engine, then trigger one ``recrawl`` run with them.

    Permission (trigger the DAG) is checked before the body is validated or any config is loaded."""
    from crawl.cluster import check_run_dask_address
    from crawl.config import ConfigError, load_config
    from crawl.errors import SeedError
    from crawl.round import validate_seeds

    conf = req.model_dump(exclude_none=True)
    overrides = {k: v for k, v in conf.items() if k != "seeds" and v != ""}  # params = config keys
    try:
        overrides["dask_address"] = check_run_dask_address(conf.get("dask_address"))
        cfg = load_config(overrides={**overrides, "root": crawl_root()})
        seeds = validate_seeds(req.seeds, cfg)
    except SeedError as exc:
        raise HTTPException(400, {"message": str(exc), "bad_seeds": [{"seed": s, "reason": r} for s, r in exc.bad]}) from exc
    except ConfigError as exc:
        raise HTTPException(400, str(exc)) from exc
    status, run = _airflow_call(request, "POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                                {"logical_date": None, "conf": conf})
    if status >= 400:
        detail = run.get("detail") if isinstance(run, dict) else run
        raise HTTPException(status if status in (400, 401, 403, 404, 409, 422) else 502,
                            f"triggering DAG {DAG_ID!r} failed: {detail}")
    _, dag = _airflow_call(request, "GET", f"/api/v2/dags/{DAG_ID}")
    return {
        "crawl_id": req.crawl_id,
        "dag_id": DAG_ID,
        "dag_run_id": run["dag_run_id"],
        "state": run.get("state"),
        "seeds": seeds,
        "dag_is_paused": bool(dag.get("is_paused")) if isinstance(dag, dict) else None,
        "triggered_by": user.get_name(),
    }


@app.get("/crawls", dependencies=[CAN_READ])
def list_crawls() -> dict[str, Any]:
    from crawl import api

    return {"crawls": api.list_crawls(crawl_root())}


def _check_crawl_id(crawl_id: str) -> None:
    if not is_crawl_id(crawl_id):
        raise HTTPException(400, f"crawl_id must match {CRAWL_ID_RE.pattern} (the whole value), got {crawl_id!r}")


def _summary_or_404(crawl_id: str) -> dict[str, Any]:
    """The crawl's summary; 404 naming the reason for an unknown crawl or one with no published round."""
    from crawl import api

    summary = api.crawl_summary(crawl_root(), crawl_id)
    if summary is None:  # also a crawl just started: its files appear when its run's inject task has run
        raise HTTPException(404, f"unknown crawl {crawl_id!r}: nothing under the crawl root for it yet (a crawl "
                                 "started with POST /crawl/crawls appears once its DAG run's inject task has run; "
                                 "a run waits while another round runs)")
    if not summary.get("last_round"):
        raise HTTPException(404, f"crawl {crawl_id!r} has not published a round yet: "
                                 "its first round is still running (or failed); try again when it has finished")
    return summary


@app.get("/crawls/{crawl_id}", dependencies=[CAN_READ])
def get_crawl(crawl_id: str) -> dict[str, Any]:
    _check_crawl_id(crawl_id)
    return {"crawl_id": crawl_id, **_summary_or_404(crawl_id)}


def _download_headers(capture: dict[str, Any]) -> dict[str, str]:
    """Headers that keep a stored body from being rendered on the Airflow origin (stored XSS): a
    download (``attachment``), no type sniffing, and a sandbox (no script, own origin) should a
    browser show it anyway."""
    digest = "".join(c for c in str(capture.get("content_digest") or "") if c.isalnum())[:64] or "body"
    return {
        "Content-Disposition": f'attachment; filename="{capture["crawl_id"]}-{digest}.bin"',
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Cache-Control": "private, no-store",
    }


# what the dashboard pages (plugins/crawl_dashboard.py) take from this app: its crawl root and its
# rule for serving stored bodies
app.state.crawl_root = crawl_root
app.state.download_headers = _download_headers
app.include_router(crawl_dashboard.router, prefix="/dashboard")


@app.get("/pages", response_model=None, dependencies=[CAN_READ])
def get_page(
    url: Annotated[str, Query(min_length=1, max_length=8192)],
    crawl_id: Annotated[str | None, Query()] = None,
    body: Annotated[bool, Query()] = False,
) -> dict[str, Any] | StreamingResponse:
    """The latest capture of ``url`` in ``crawl_id`` (or, without it, the latest across all crawls)."""
    from crawl import api

    if not url.lower().startswith(("http://", "https://", "ftp://")):  # ftp: captures of crawls that opted in
        raise HTTPException(400, "url must be an absolute http(s) or ftp URL")
    root = crawl_root()
    if crawl_id is not None:
        _check_crawl_id(crawl_id)
        _summary_or_404(crawl_id)
        crawl_ids = [crawl_id]
    else:  # a crawl that has not published yet has nothing to find (api.lookup answers None)
        crawl_ids = api.list_crawls(root)
    found = []
    for cid in crawl_ids:
        try:
            capture = api.lookup(root, cid, url)
        except ValueError as exc:  # the engine could not canonicalise it
            raise HTTPException(400, str(exc)) from exc
        if capture is not None:
            found.append({"crawl_id": cid, **capture})
    if not found:
        raise HTTPException(404, f"unknown URL {url!r}" + (f" in crawl {crawl_id!r}" if crawl_id else ""))
    capture = max(found, key=lambda c: str(c.get("fetch_time") or ""))
    if not body:
        return json.loads(json.dumps(capture, default=str))
    if not capture.get("warc_filename"):
        raise HTTPException(404, f"no stored body for {url!r} (fetch status {capture.get('fetch_status')!r})")
    payload = api.read_body(root, capture)
    media = str(capture.get("content_mime_type") or "application/octet-stream")
    chunks = (payload[i:i + BODY_CHUNK] for i in range(0, len(payload), BODY_CHUNK))
    return StreamingResponse(chunks, media_type=media, headers={
        "X-Crawl-Id": capture["crawl_id"],
        "X-Capture-Url": str(capture.get("url", "")),
        "X-Content-Digest": str(capture.get("content_digest") or ""),
        **_download_headers(capture),
    })


@app.get("/summary", response_class=HTMLResponse, dependencies=[CAN_READ])
def summary_page() -> str:
    """A plain HTML table of all crawls, shown in the Airflow UI as an external view."""
    from crawl import api

    root = crawl_root()
    rows = []
    for cid in api.list_crawls(root):
        s = api.crawl_summary(root, cid) or {}
        cells = [cid] + [s.get(k, "") for k in ("known", "fetched", "queued", "failed", "gone", "duplicates",
                                                 "last_round")]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("crawl", "known", "fetched", "queued", "failed", "gone",
                                              "duplicates", "last round"))
    body = "\n".join(rows) or '<tr><td colspan="8">no crawls yet: trigger the recrawl DAG</td></tr>'
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Crawls</title>"
        "<style>body{font-family:sans-serif;margin:1rem}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}td:first-child{text-align:left}"
        "</style></head><body>"
        f"<h1>Crawls</h1><p>root: <code>{html.escape(root)}</code></p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></body></html>"
    )


class CrawlApiPlugin(AirflowPlugin):
    name = "crawl_api"
    fastapi_apps = [{"app": app, "url_prefix": "/crawl", "name": "Crawl API"}]
    external_views = [{
        "name": "Crawls",
        "href": "/crawl/dashboard/",
        "destination": "nav",
        "category": "browse",
        "url_route": "crawls",
    }]
