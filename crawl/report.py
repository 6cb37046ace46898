"""How a crawl is going, as numbers: DuckDB over a crawl's published output, as of one round.

Why a module of its own: the per-round report file (``reports/crawl=ID/round=NNNNN.html``, written by
the report step and ``crawl run``) and the Airflow dashboard (plugins/crawl_dashboard.py) show the same
figures, so both take them from here; the HTML and the charts (:mod:`crawl.reporthtml`,
:mod:`crawl.charts`) only lay them out.

Everything is read from files a published round left behind, never from a running process:

- page index ``index/crawl=ID/...`` (captures with a WARC record: duplicates, re-fetch outcomes);
- fetch records ``state/crawl=ID/rounds/NNNNN/fetched/part=KKK.parquet`` (every attempt, errors);
- CrawlDb ``state/crawl=ID/crawldb/v=NNNNN`` (status, change rate, priority, next fetch time);
- the round's step stats (``generate.json``, ``fetch_parse.json``, ``reprioritise.json``, manifest).

"As of round N" means only rounds 1..N and CrawlDb version N are read, so a report of round N reads
the same whatever rounds came after it. Times are the rounds' own (simulated) times, not the wall
clock, for the same reason.

Definitions (one place; the tests re-derive them with their own SQL):

- *fetched*: page fetch attempts answered 2xx (fetch records, subsets ``warc``/``crawldiagnostics``);
  *not modified*: 304 answers; *errors*: attempts ending ``retry``, ``http_error`` or ``gone``, by
  :data:`ERROR_CLASSES`; *not tried*: ``deferred`` and ``robots_denied`` rows.
- *new URLs* of round r: CrawlDb rows with ``discovered_round = r`` (seeds, links, sitemaps, redirects).
- *duplicates*/*near-duplicates*: page-index captures of the round with that ``crawl_status``.
- *re-fetch outcome*: page-index captures with ``changed`` true/false (null = first capture).
- *stale share*: mean over URLs holding a copy of P(changed since the copy) = 1 − exp(−λ·age),
  λ the CrawlDb's estimated change rate (per day), at the round's time.
- *politeness wait* / *request time*: the fetcher's ``politeness_wait_s`` / ``request_s`` stats,
  summed over partitions (queue-seconds: can exceed the wall time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa

from crawl import crawldb, duck
from crawl.index import INDEX_SCHEMA
from crawl.records import FETCH_SCHEMA
from crawl.store import Store
from crawl.url import KNOWN_SCHEMES, canonicalize

DAY_S = 86_400.0
PAGE_SUBSETS = ("warc", "crawldiagnostics")
ERROR_STATUSES = ("retry", "http_error", "gone")
CONTENT_STATUSES = ("fetched", "not_modified", "duplicate", "near_duplicate")
# (label, SQL condition over a fetch record already known to be an error), first match wins
ERROR_CLASSES: tuple[tuple[str, str], ...] = (
    ("slow down (429/503)", "http_status IN (429, 503)"),
    ("HTTP 5xx", "http_status >= 500"),
    ("HTTP 4xx", "http_status >= 400"),
    ("timeout", "error IN ('timeout', 'connect_timeout')"),
    ("DNS", "error = 'dns'"),
    ("connection", "error IN ('connect', 'reset', 'protocol')"),
    ("other", "true"),
)
# change-rate bins (changes per day) for the distribution chart
RATE_BINS: tuple[tuple[str, float, float], ...] = (
    ("< 1/month", 0.0, 1 / 30),
    ("1/month – 1/week", 1 / 30, 1 / 7),
    ("1/week – 1/day", 1 / 7, 1.0),
    ("1/day – 4/day", 1.0, 4.0),
    ("> 4/day", 4.0, math.inf),
)
# age of the copy held (days since its last successful fetch) at the round's time
AGE_BINS: tuple[tuple[str, float], ...] = (
    ("< 1 day", 1.0), ("1 – 7 days", 7.0), ("7 – 30 days", 30.0), ("> 30 days", math.inf),
)
HOST_SORTS = ("pages", "errors", "backoff", "robots_denied", "delay_s", "known")


def _sql_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def error_class_sql() -> str:
    """A SQL CASE naming the error class of a fetch record (columns http_status, error)."""
    whens = " ".join(f"WHEN {cond} THEN '{label}'" for label, cond in ERROR_CLASSES)
    return f"CASE {whens} END"


def _iso(value: Any, timespec: str = "seconds") -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
    return str(value)


@dataclass
class CrawlView:
    """A DuckDB connection over one crawl as of round ``round_no`` (views idx, fx, db, dbv)."""

    store: Store
    round_no: int
    con: duckdb.DuckDBPyConnection
    round_times: dict[int, datetime] = field(default_factory=dict)
    #: what several of a report's figures read, computed once per view (the host table is built twice)
    memo: dict[str, Any] = field(default_factory=dict)

    def rows(self, sql: str, params: list[Any] | dict[str, Any] | None = None) -> list[dict[str, Any]]:
        rel = self.con.execute(sql, params or [])
        cols = [d[0] for d in rel.description]
        return [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]

    def step(self, round_no: int, name: str) -> dict[str, Any]:
        return self.store.read_json(self.store.round_dir(round_no, f"{name}.json"), {}) or {}

    @property
    def round_time(self) -> datetime | None:
        return self.round_times.get(self.round_no)

    def next_round_time(self) -> datetime | None:
        """When the next round is expected: this round's time plus the spacing the scheduler assumed."""
        t = self.round_time
        if t is None:
            return None
        spacing = self.step(self.round_no, "reprioritise").get("round_spacing_s") or DAY_S
        return t + timedelta(seconds=float(spacing))


def open_view(root: str, crawl_id: str, as_of: int | None = None) -> CrawlView:
    """The crawl's output as of round ``as_of`` (default: the published round).

    Raises ValueError for a round that is not published (nothing is read then).
    """
    store = Store(root, crawl_id)
    current = store.current_round()
    n = current if as_of is None else int(as_of)
    if n < 0 or n > current:
        raise ValueError(f"crawl {crawl_id!r}: round {n} is not published (published: 1..{current})")
    con = duck.for_store(store)  # its views are TEMP: this connection's own on the shared database
    if store.fs.__class__.__name__ == "LocalFileSystem":
        prefix = store.base.rstrip("/")
    else:
        con.register_filesystem(store.fs)
        prefix = store.root.rstrip("/")
    cid = crawl_id.replace("'", "")

    def source(name: str, rel_dir: str, glob: str, schema: pa.Schema, select: str, where: str) -> None:
        # files, not the directory: a crawl whose rounds fetched nothing yet has rounds/ but no fetched/
        if n > 0 and store.ls(rel_dir) and store.fs.glob(store.abs(glob)):
            src = (f"read_parquet('{prefix}/{glob}', union_by_name = true, hive_partitioning = false, "
                   f"filename = true)")
            con.execute(f"CREATE TEMP VIEW {name} AS SELECT * FROM (SELECT *, {select} FROM {src}) WHERE {where}")
        else:
            empty = schema.empty_table()
            con.register(f"{name}_empty", empty)
            con.execute(f"CREATE TEMP VIEW {name} AS SELECT *, NULL::VARCHAR AS filename, {select} "
                        f"FROM {name}_empty WHERE false")

    source("idx", f"index/crawl={cid}", f"index/crawl={cid}/*/*.parquet", INDEX_SCHEMA,
           "regexp_extract(filename, '/subset=([^/]+)/', 1) AS subset", f"round <= {n}")
    source("fx", store.state("rounds"), f"{store.state('rounds')}/*/fetched/*.parquet", FETCH_SCHEMA,
           "CAST(regexp_extract(filename, '/rounds/([0-9]+)/fetched/', 1) AS INTEGER) AS round",
           f"round BETWEEN 1 AND {n}")
    def versions(name: str, vdir: str, where: str) -> None:
        """View ``name`` of the CrawlDb versions in directories ``crawldb/<vdir>``: base files, and where
        a version was written as base + overlays (crawl.crawldb.write_overlay), the overlay rows win."""
        glob = f"{store.state('crawldb')}/{vdir}"
        version = "CAST(regexp_extract(filename, '/v=([0-9]+)/', 1) AS INTEGER) AS version"
        listed = store.state("crawldb") if vdir == "*" else glob
        source(name, listed, f"{glob}/*.parquet", crawldb.CRAWLDB_SCHEMA, version, where)
        if n > 0 and store.fs.glob(store.abs(f"{glob}/overlay/*.parquet")):
            source(f"{name}_over", store.state("crawldb"), f"{glob}/overlay/*.parquet", crawldb.CRAWLDB_SCHEMA,
                   version, where)
            con.execute(f"ALTER VIEW {name} RENAME TO {name}_base")
            con.execute(f"""CREATE TEMP VIEW {name} AS
                SELECT * FROM {name}_base b WHERE NOT EXISTS (
                    SELECT 1 FROM {name}_over o WHERE o.version = b.version AND o.url_hash = b.url_hash)
                UNION ALL BY NAME SELECT * FROM {name}_over""")

    versions("dbv", "*", f"version BETWEEN 1 AND {n}")
    # version N alone from its own directory: a filter on the version column would still open every
    # version's files (the version is parsed from the file name), so each query on db read N versions
    versions("db", f"v={n:05d}", f"version = {n}")
    view = CrawlView(store, n, con)
    for r in range(1, n + 1):
        now = view.step(r, "generate").get("now")
        if now:
            view.round_times[r] = datetime.fromisoformat(now).astimezone(UTC)
    return view


# ---- per-round series -------------------------------------------------------------------------------
def round_series(view: CrawlView) -> list[dict[str, Any]]:
    """One dict per round 1..N: fetch outcomes, errors by class, discovery, dedup, rate, time split."""
    n = view.round_no
    if n == 0:
        return []
    labels = [label for label, _ in ERROR_CLASSES]
    err_cols = ", ".join(f"count(*) FILTER (WHERE err = '{label}') AS \"err:{label}\"" for label in labels)
    sql = f"""
    WITH r AS (SELECT range::INTEGER AS round FROM range(1, {n} + 1)),
    f AS (
        SELECT round,
               count(*) FILTER (WHERE status = 'fetched') AS fetched,
               count(*) FILTER (WHERE status = 'not_modified') AS not_modified,
               count(*) FILTER (WHERE status IN ({_sql_list(ERROR_STATUSES)})) AS errors,
               count(*) FILTER (WHERE status = 'deferred') AS deferred,
               count(*) FILTER (WHERE status = 'robots_denied') AS robots_denied,
               count(DISTINCT host) AS hosts,
               {err_cols}
        FROM (SELECT *, CASE WHEN status IN ({_sql_list(ERROR_STATUSES)}) THEN {error_class_sql()} END AS err
              FROM fx WHERE subset IN ({_sql_list(PAGE_SUBSETS)}))
        GROUP BY round
    ),
    i AS (
        SELECT round,
               count(*) FILTER (WHERE subset = 'warc' AND crawl_status = 'duplicate') AS duplicates,
               count(*) FILTER (WHERE subset = 'warc' AND crawl_status = 'near_duplicate') AS near_duplicates,
               count(*) FILTER (WHERE changed) AS refetch_changed,
               count(*) FILTER (WHERE NOT changed) AS refetch_unchanged
        FROM idx WHERE subset IN ({_sql_list(PAGE_SUBSETS)}) GROUP BY round
    ),
    d AS (SELECT discovered_round AS round, count(*) AS new_urls FROM db GROUP BY 1)
    SELECT r.round, coalesce(fetched, 0) AS fetched, coalesce(not_modified, 0) AS not_modified,
           coalesce(errors, 0) AS errors, coalesce(deferred, 0) AS deferred,
           coalesce(robots_denied, 0) AS robots_denied, coalesce(hosts, 0) AS hosts,
           coalesce(new_urls, 0) AS new_urls, coalesce(duplicates, 0) AS duplicates,
           coalesce(near_duplicates, 0) AS near_duplicates, coalesce(refetch_changed, 0) AS refetch_changed,
           coalesce(refetch_unchanged, 0) AS refetch_unchanged,
           {", ".join(f'coalesce("err:{label}", 0) AS "err:{label}"' for label in labels)}
    FROM r LEFT JOIN f USING (round) LEFT JOIN i USING (round) LEFT JOIN d USING (round)
    ORDER BY r.round
    """
    out = []
    stale = {row["version"]: row for row in stale_series(view)}
    for row in view.rows(sql):
        r = row["round"]
        fp = view.step(r, "fetch_parse")
        parts = [p.get("fetch", {}) for p in fp.get("per_partition", [])]
        manifest = view.step(r, "manifest")
        rec = {k: v for k, v in row.items() if not k.startswith("err:")}
        rec["errors_by_class"] = {label: int(row[f"err:{label}"]) for label in labels}
        rec.update({
            "time": _iso(view.round_times.get(r)),
            "published_at": manifest.get("published_at"),
            "requests": int(fp.get("fetched", 0) or 0),
            "fetch_seconds": float(fp.get("seconds", 0.0) or 0.0),
            "pages_per_s": float(fp.get("pages_per_s", 0.0) or 0.0),
            "request_s": round(sum(float(p.get("request_s", 0.0) or 0.0) for p in parts), 3),
            "politeness_wait_s": round(sum(float(p.get("politeness_wait_s", 0.0) or 0.0) for p in parts), 3),
            "stale_share": stale.get(r, {}).get("stale_share"),
            "dag_run": view.step(r, "airflow") or None,
            "dask_dashboard": fp.get("dask_dashboard") or None,  # live only while that round's cluster ran
            "health": round_health(manifest),
        })
        out.append(rec)
    return out


def round_health(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The health gate's verdict on a published round (:mod:`crawl.health`, kept in its manifest), with
    the thresholds that round ran with; None for a round published before the gate existed.

    Why here: the rounds table, the banner of the dashboard and report file, and the crawls list all
    say "degraded, because ..." from this one reading of the manifest.
    """
    from crawl.config import CrawlConfig

    h = manifest.get("health")
    if not isinstance(h, dict) or "host_failure_share" not in h:
        return None
    conf = manifest.get("config") or {}
    return {**h, "degraded": bool(manifest.get("degraded", h.get("degraded"))),
            "reasons": list(h.get("reasons") or []),
            "max_host_failure_share": float(conf.get("degraded_host_failure_share",
                                                     CrawlConfig.degraded_host_failure_share)),
            "min_fetched_share": float(conf.get("degraded_min_fetched_share",
                                                CrawlConfig.degraded_min_fetched_share))}


def _stale_expr(at_sql: str) -> str:
    age_days = f"greatest(epoch({at_sql}) - epoch(last_success_time), 0) / {DAY_S}"
    return f"1 - exp(-coalesce(change_rate, 0) * {age_days})"


def stale_series(view: CrawlView) -> list[dict[str, Any]]:
    """Estimated stale share of the copies held by each CrawlDb version, at its round's time."""
    times = [(v, t) for v, t in sorted(view.round_times.items()) if v <= view.round_no]
    if not times:
        return []
    values = ", ".join(f"({v}, TIMESTAMPTZ '{t.isoformat()}')" for v, t in times)
    return view.rows(f"""
        WITH t(version, round_at) AS (VALUES {values})
        SELECT version, count(*) AS copies, avg({_stale_expr('t.round_at')}) AS stale_share
        FROM dbv JOIN t USING (version) WHERE last_success_time IS NOT NULL
        GROUP BY version ORDER BY version
    """)


# ---- CrawlDb, queue, freshness ----------------------------------------------------------------------
def status_breakdown(view: CrawlView) -> list[dict[str, Any]]:
    return view.rows("SELECT status, count(*) AS urls FROM db GROUP BY 1 ORDER BY urls DESC, status")


def _queue_where(view: CrawlView) -> tuple[str, list[Any]]:
    at = view.next_round_time()
    where = "status NOT IN ('gone', 'filtered')"
    if at is None:
        return where, []
    return where + " AND (next_fetch_time IS NULL OR next_fetch_time <= ?)", [at]


def queue(view: CrawlView, limit: int = 25, pool: str | None = None) -> dict[str, Any]:
    """The next round's queue: URLs due by the next round's expected time, by pool and priority.

    The frontier splits the budget into never-fetched URLs (``coverage_share``, ranked by importance
    and depth) and re-fetches (ranked by importance × expected staleness), so the two pools are
    listed apart: their priorities are on different scales. ``why`` says what put the URL there.
    """
    where, params = _queue_where(view)
    at = view.next_round_time()
    at_sql = "?::TIMESTAMPTZ" if at is not None else "now()"
    p_changed = f"1 - exp(-coalesce(change_rate, 0) * greatest(epoch({at_sql}) - epoch(last_success_time), 0) / {DAY_S})"
    pools = ("new", "refetch") if pool is None else (pool,)
    out: dict[str, Any] = {"next_round_at": _iso(at), "counts": {}, "rows": {}}
    counts = view.rows(f"""
        SELECT coalesce(fetch_count, 0) = 0 AS fresh, count(*) AS n FROM db WHERE {where} GROUP BY 1
    """, params)
    out["counts"] = {"new": 0, "refetch": 0}
    for c in counts:
        out["counts"]["new" if c["fresh"] else "refetch"] = int(c["n"])
    for name in pools:
        fresh = "coalesce(fetch_count, 0) = 0" if name == "new" else "coalesce(fetch_count, 0) > 0"
        rows = view.rows(f"""
            SELECT url, host, status, source, depth, priority, change_rate, importance, inlinks,
                   next_fetch_time, last_success_time, fetch_count, retry_count,
                   CASE WHEN last_success_time IS NULL THEN NULL ELSE {p_changed} END AS p_changed
            FROM db WHERE {where} AND {fresh}
            ORDER BY priority DESC NULLS LAST, url_hash LIMIT {int(limit)}
        """, ([at] if at is not None else []) + params)
        for row in rows:
            row["why"] = _why(row)
            row["next_fetch_time"] = _iso(row["next_fetch_time"])
            row["last_success_time"] = _iso(row["last_success_time"])
        out["rows"][name] = rows
    return out


def _why(row: dict[str, Any]) -> str:
    status, source, depth = row["status"], row["source"], row["depth"] or 0
    if status == "retry":
        return f"retry {row['retry_count'] or 1} after a transient error"
    if status == "deferred":
        return "deferred last round (host backoff, round deadline or robots.txt unavailable)"
    if not row["fetch_count"]:
        origin = {"seed": "seed", "sitemap": "listed in a sitemap", "redirect": "redirect target"}.get(
            source, f"linked, {depth} hop{'s' if depth != 1 else ''} from a seed")
        return f"new URL: {origin}"
    later = {"robots_denied": "robots.txt disallowed it; asked again once the robots.txt cache expires",
             "http_error": "HTTP error last time; tried again after 30 days",
             "redirect": "redirected last time; re-checked weekly"}
    if status in later:
        return later[status]
    p = row.get("p_changed")
    if p is None:
        return f"re-fetch ({status.replace('_', ' ')})"
    return f"re-fetch: {100 * p:.0f}% chance it changed (≈{row['change_rate'] or 0:.2g} changes/day)"


def due_histogram(view: CrawlView) -> list[dict[str, Any]]:
    """How many URLs come due when: by the next round, then within a day, a week, later, never."""
    at = view.next_round_time()
    if at is None:
        return []
    rows = view.rows("""
        SELECT CASE
                 WHEN status IN ('gone', 'filtered') OR next_fetch_time IS NULL THEN 'never'
                 WHEN next_fetch_time <= ? THEN 'next round'
                 WHEN next_fetch_time <= ? + INTERVAL 1 DAY THEN 'within a day'
                 WHEN next_fetch_time <= ? + INTERVAL 7 DAY THEN 'within a week'
                 ELSE 'later' END AS due, count(*) AS urls
        FROM db GROUP BY 1
    """, [at, at, at])
    got = {r["due"]: int(r["urls"]) for r in rows}
    return [{"due": k, "urls": got.get(k, 0)} for k in ("next round", "within a day", "within a week", "later",
                                                          "never")]


def freshness(view: CrawlView) -> dict[str, Any]:
    """Estimated staleness of the copies held, the change-rate distribution, re-fetch outcomes."""
    at, nxt = view.round_time, view.next_round_time()
    out: dict[str, Any] = {"at": _iso(at), "next_round_at": _iso(nxt), "copies": 0, "stale_share": None,
                           "stale_share_next_round": None, "rate_bins": [], "median_rate": None}
    if at is None:
        return out
    row = view.rows(f"""
        SELECT count(*) AS copies, avg({_stale_expr('?::TIMESTAMPTZ')}) AS stale_now,
               avg({_stale_expr('?::TIMESTAMPTZ')}) AS stale_next, median(change_rate) AS median_rate
        FROM db WHERE last_success_time IS NOT NULL
    """, [at, nxt])[0]
    out.update(copies=int(row["copies"]), stale_share=row["stale_now"], stale_share_next_round=row["stale_next"],
               median_rate=row["median_rate"])
    cases = " ".join(f"WHEN change_rate < {hi if math.isfinite(hi) else 1e300} THEN '{label}'"
                     for label, _, hi in RATE_BINS)
    got = {r["bin"]: int(r["urls"]) for r in view.rows(f"""
        SELECT CASE {cases} END AS bin, count(*) AS urls
        FROM db WHERE last_success_time IS NOT NULL AND change_rate IS NOT NULL GROUP BY 1
    """)}
    out["rate_bins"] = [{"bin": label, "urls": got.get(label, 0)} for label, _, _ in RATE_BINS]
    age = f"(epoch(?::TIMESTAMPTZ) - epoch(last_success_time)) / {DAY_S}"
    cases = " ".join(f"WHEN {age} < {hi if math.isfinite(hi) else 1e300} THEN '{label}'" for label, hi in AGE_BINS)
    got = {r["bin"]: int(r["copies"]) for r in view.rows(f"""
        SELECT CASE {cases} END AS bin, count(*) AS copies FROM db WHERE last_success_time IS NOT NULL GROUP BY 1
    """, [at] * len(AGE_BINS))}
    out["age_bins"] = [{"bin": label, "copies": got.get(label, 0)} for label, _ in AGE_BINS]
    tot = view.rows("""
        SELECT count(*) FILTER (WHERE changed) AS changed, count(*) FILTER (WHERE NOT changed) AS unchanged
        FROM idx WHERE subset IN ('warc', 'crawldiagnostics')
    """)[0]
    out["refetch_changed"], out["refetch_unchanged"] = int(tot["changed"]), int(tot["unchanged"])
    checked = out["refetch_changed"] + out["refetch_unchanged"]
    out["refetch_unchanged_share"] = out["refetch_unchanged"] / checked if checked else None
    return out


# ---- hosts ------------------------------------------------------------------------------------------
def host_delays(view: CrawlView) -> dict[str, float]:
    """host -> robots.txt Crawl-delay (s), from the robots cache the next round's generate reads."""
    if "host_delays" not in view.memo:
        view.memo["host_delays"] = _host_delays(view)
    return view.memo["host_delays"]


def _host_delays(view: CrawlView) -> dict[str, float]:
    from crawl.config import DEFAULT_USER_AGENT, CrawlConfig
    from crawl.tasks import host_crawl_delays

    settings = view.step(view.round_no, "manifest").get("config") or {}
    t = host_crawl_delays(view.store, view.round_no, settings.get("user_agent") or DEFAULT_USER_AGENT,
                          int(settings.get("robots_max_bytes") or CrawlConfig.robots_max_bytes))
    if t is None:
        return {}
    return dict(zip(t.column("host").to_pylist(), t.column("delay_s").to_pylist(), strict=True))


def configured_delay(view: CrawlView) -> float | None:
    value = (view.step(view.round_no, "manifest").get("config") or {}).get("politeness_delay_s")
    return None if value is None else float(value)


def hosts(view: CrawlView, limit: int = 20, sort: str = "pages") -> list[dict[str, Any]]:
    """Per host: known URLs, pages fetched, errors, backoffs (429/503, host deferred), robots-denied URLs,
    and the delay between its requests (max of the configured delay and its Crawl-delay)."""
    if sort not in HOST_SORTS:
        raise ValueError(f"sort must be one of {', '.join(HOST_SORTS)}")
    base = configured_delay(view)
    rows = view.rows(f"SELECT * FROM {_host_rows(view, base)} ORDER BY {sort} DESC NULLS LAST, host LIMIT {int(limit)}")
    for r in rows:
        r["last_fetch"] = _iso(r["last_fetch"])
        if base is None and r["crawl_delay_s"] is None:
            r["delay_s"] = None
    return rows


def _host_rows(view: CrawlView, base: float | None) -> str:
    """A temp table of :func:`hosts`' rows, unsorted: built once per view (one scan of the CrawlDb and
    of the fetch records), then each sort and limit of the host table is a query on it."""
    if "host_rows" in view.memo:
        return view.memo["host_rows"]
    crawl_delays = host_delays(view)
    delays = pa.table({"host": pa.array(list(crawl_delays), pa.string()),
                       "crawl_delay_s": pa.array(list(crawl_delays.values()), pa.float64())})
    view.con.register("host_delays", delays)
    view.con.execute(f"""
        CREATE TEMP TABLE host_rows AS
        WITH k AS (
            SELECT host, count(*) AS known,
                   count(*) FILTER (WHERE status = 'robots_denied') AS robots_denied
            FROM db GROUP BY host
        ),
        f AS (
            SELECT host,
                   count(*) FILTER (WHERE status = 'fetched') AS pages,
                   count(*) FILTER (WHERE status IN ({_sql_list(ERROR_STATUSES)})) AS errors,
                   count(*) FILTER (WHERE http_status IN (429, 503) OR error = 'host_backoff') AS backoff,
                   max(fetch_time) AS last_fetch
            FROM fx WHERE subset IN ({_sql_list(PAGE_SUBSETS)}) GROUP BY host
        )
        SELECT host, coalesce(k.known, 0) AS known, coalesce(f.pages, 0) AS pages,
               coalesce(f.errors, 0) AS errors, coalesce(f.backoff, 0) AS backoff,
               coalesce(k.robots_denied, 0) AS robots_denied, d.crawl_delay_s, f.last_fetch,
               greatest(coalesce(?, 0), coalesce(d.crawl_delay_s, 0)) AS delay_s
        FROM k FULL JOIN f USING (host) LEFT JOIN host_delays d USING (host)
    """, [base])
    view.memo["host_rows"] = "host_rows"
    return "host_rows"


def host_count(view: CrawlView) -> int:
    return int(view.con.execute("SELECT count(DISTINCT host) FROM db").fetchone()[0])


# ---- one URL ------------------------------------------------------------------------------------------
def capture_history(view: CrawlView, url: str) -> dict[str, Any]:
    """Every fetch attempt of ``url`` (canonicalised): round, status, digest, changed?, stored record.

    Raises ValueError for a URL that is not an absolute http(s) or ftp URL.
    """
    canon = canonicalize(url, schemes=KNOWN_SCHEMES) if isinstance(url, str) else None
    if canon is None:
        raise ValueError(f"not an absolute http(s) or ftp URL: {url!r}")
    attempts = view.rows(f"""
        SELECT f.round, f.fetch_time, f.status, f.http_status, f.error, f.subset, f.payload_digest,
               f.content_type, f.content_length, f.warc_type, f.redirect_location,
               i.crawl_status, i.changed, i.duplicate_of,
               f.warc_filename IS NOT NULL AS stored
        FROM fx f LEFT JOIN idx i
          ON i.warc_filename = f.warc_filename AND i.warc_record_offset = f.warc_record_offset
        WHERE f.url = ? AND f.subset IN ({_sql_list(PAGE_SUBSETS)})
        ORDER BY f.fetch_time, f.round
    """, [canon])
    for a in attempts:
        a["fetch_time"] = _iso(a["fetch_time"], "milliseconds")  # names the capture in body links
    row = view.rows("""
        SELECT status, source, depth, discovered_round, fetch_count, check_count, change_count,
               last_change_time, last_success_time, next_fetch_time, priority, change_rate, importance,
               inlinks, duplicate_of, redirect_to
        FROM db WHERE url = ?
    """, [canon])
    state = row[0] if row else None
    if state:
        for k in ("last_change_time", "last_success_time", "next_fetch_time"):
            state[k] = _iso(state[k])
    return {"url": canon, "asked": url, "attempts": attempts, "crawldb": state}


def capture_body(view: CrawlView, url: str, fetch_time: str) -> tuple[dict[str, Any], bytes]:
    """(capture, payload) of the capture of ``url`` at ``fetch_time`` (ISO, as in :func:`capture_history`).

    A revisit's body is the response record with the same digest: a 304 to a conditional GET is a
    revisit too (server-not-modified profile, naming the digest of the copy it confirmed). A 304 kept
    as a diagnostic (no validators sent or no stored copy known, and crawls written before 304s were
    revisits) takes the body of the latest earlier capture of the URL. Raises LookupError when there is none.
    """
    from crawl.warc import read_record

    canon = canonicalize(url, schemes=KNOWN_SCHEMES)
    if canon is None:
        raise ValueError(f"not an absolute http(s) or ftp URL: {url!r}")
    try:
        at = datetime.fromisoformat(fetch_time.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"not an ISO 8601 time: {fetch_time!r}") from exc
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    found = view.rows("""
        SELECT url, fetch_time, subset, warc_type, content_digest, content_mime_type, crawl_status
        FROM idx WHERE url = ? AND subset IN ('warc', 'crawldiagnostics')
          AND fetch_time BETWEEN ?::TIMESTAMPTZ - INTERVAL 1 SECOND AND ?::TIMESTAMPTZ + INTERVAL 1 SECOND
        ORDER BY abs(epoch(fetch_time) - epoch(?::TIMESTAMPTZ)) LIMIT 1
    """, [canon, at, at, at])
    if not found:
        raise LookupError(f"no stored capture of {canon} at {fetch_time}")
    cap = found[0]
    if cap["subset"] == "crawldiagnostics" and cap["crawl_status"] == "not_modified":
        earlier = view.rows("""
            SELECT warc_type, content_digest FROM idx
            WHERE url = ? AND subset = 'warc' AND fetch_time < ? ORDER BY fetch_time DESC LIMIT 1
        """, [canon, cap["fetch_time"]])
        if not earlier:
            raise LookupError(f"{canon}: the copy the 304 at {fetch_time} confirmed is not stored")
        cap = {**cap, "warc_type": earlier[0]["warc_type"], "content_digest": earlier[0]["content_digest"],
               "subset": "warc"}
    if cap["warc_type"] == "revisit" or cap["subset"] == "warc":
        rec = view.rows("""
            SELECT warc_filename, warc_record_offset, warc_record_length FROM idx
            WHERE subset = 'warc' AND warc_type IN ('response', 'resource') AND content_digest = ? AND fetch_time <= ?
            ORDER BY (url = ?) DESC, fetch_time DESC LIMIT 1
        """, [cap["content_digest"], cap["fetch_time"], canon])
    else:  # an error page or redirect kept in crawldiagnostics: its own record
        rec = view.rows("""
            SELECT warc_filename, warc_record_offset, warc_record_length FROM idx
            WHERE url = ? AND subset = 'crawldiagnostics' AND fetch_time = ?
        """, [canon, cap["fetch_time"]])
    if not rec:
        raise LookupError(f"{canon}: no stored body for the capture at {fetch_time}")
    r = rec[0]
    record = read_record(view.store.root, r["warc_filename"], int(r["warc_record_offset"]),
                         int(r["warc_record_length"]))
    cap["fetch_time"] = _iso(cap["fetch_time"], "milliseconds")
    return cap, record.payload


# ---- the whole report -----------------------------------------------------------------------------------
@dataclass
class Report:
    crawl_id: str
    round_no: int
    round_time: str | None
    rounds: list[dict[str, Any]]
    status: list[dict[str, Any]]
    queue: dict[str, Any]
    due: list[dict[str, Any]]
    freshness: dict[str, Any]
    hosts: list[dict[str, Any]]
    hosts_by_errors: list[dict[str, Any]]
    host_count: int
    known: int
    configured_delay_s: float | None


def build(root: str, crawl_id: str, as_of: int | None = None, queue_rows: int = 15,
          host_rows: int = 15) -> Report:
    """Everything the per-crawl page and the report file show, as of round ``as_of``."""
    view = open_view(root, crawl_id, as_of)
    status = status_breakdown(view)
    return Report(
        crawl_id=crawl_id, round_no=view.round_no, round_time=_iso(view.round_time),
        rounds=round_series(view), status=status, queue=queue(view, queue_rows), due=due_histogram(view),
        freshness=freshness(view), hosts=hosts(view, host_rows),
        hosts_by_errors=[h for h in hosts(view, 12, "errors") if h["errors"] or h["backoff"]], host_count=host_count(view),
        known=sum(int(s["urls"]) for s in status), configured_delay_s=configured_delay(view),
    )


def crawl_overview(root: str, crawl_id: str) -> dict[str, Any]:
    """One line of the crawls list, from the last round's step stats only (no scan of the output)."""
    store = Store(root, crawl_id)
    n = store.current_round()
    out: dict[str, Any] = {"crawl_id": crawl_id, "rounds": n, "round_time": None, "known": None, "requests": None,
                           "discovered": None, "pages_per_s": None, "published_at": None, "dag_run": None,
                           "report": None, "health": None}
    if n == 0:
        return out
    m = store.read_json(store.round_dir(n, "manifest.json"), {}) or {}
    out.update(round_time=(m.get("generate") or {}).get("now"), known=(m.get("update") or {}).get("known"),
               requests=(m.get("fetch_parse") or {}).get("fetched"),
               discovered=(m.get("update") or {}).get("discovered"),
               pages_per_s=(m.get("fetch_parse") or {}).get("pages_per_s"), published_at=m.get("published_at"),
               dag_run=store.read_json(store.round_dir(n, "airflow.json")),
               report=n if store.exists(report_path(store, n)) else None, health=round_health(m))
    return out


def report_path(store: Store, round_no: int) -> str:
    """Where the report file of round ``round_no`` lives, relative to the crawl root."""
    return f"reports/crawl={store.crawl_id}/round={round_no:05d}.html"


__all__ = [
    "ERROR_CLASSES", "RATE_BINS", "CrawlView", "Report", "build", "capture_body", "capture_history", "crawl_overview",
    "due_histogram", "freshness", "hosts", "open_view", "queue", "report_path", "round_health", "round_series",
    "stale_series", "status_breakdown",
]
