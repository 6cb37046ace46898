"""The outputs users query: page index (Common Crawl's columnar index names), text, link graph, images.

Column names and meanings follow Common Crawl's columnar URL index so its DuckDB/Athena/Spark
recipes run unchanged on our output; ours are appended after them. Files are written per fetch
partition at deterministic paths (``index/crawl=ID/subset=SUB/round=N-part=K.parquet``), so a rerun of
the round overwrites them, and DuckDB reads the tree with ``hive_partitioning``. They are written under
the round's staging folder (:meth:`crawl.store.Store.staged`) and appear at those paths when the
round is published.

DuckDB is imported only where a query runs (:func:`index_rows` on the driver, the rare many-captures
join of :func:`write_part_texts`): a worker's parse task writes its partition's text files with this
module, and would otherwise import DuckDB for nothing (~60-75 ms of CPU a worker, at its first parse).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.records import PAGE_PART_SCHEMA
from crawl.store import Store, part_number
from crawl.url import KNOWN_SCHEMES, is_ip_host, registered_domain, surts, tld, url_columns

INDEX_SCHEMA = pa.schema([
    ("url_surtkey", pa.string()),
    ("url", pa.string()),
    ("url_host_name", pa.string()),
    ("url_host_tld", pa.string()),
    ("url_host_registered_domain", pa.string()),
    ("url_protocol", pa.string()),
    ("url_port", pa.int32()),
    ("url_path", pa.string()),
    ("url_query", pa.string()),
    ("fetch_time", pa.timestamp("ms", tz="UTC")),
    ("fetch_status", pa.int16()),
    ("fetch_redirect", pa.string()),
    ("content_digest", pa.string()),
    ("content_mime_type", pa.string()),
    ("content_mime_detected", pa.string()),
    ("content_charset", pa.string()),
    ("content_languages", pa.string()),
    ("content_truncated", pa.string()),
    ("warc_filename", pa.string()),
    ("warc_record_offset", pa.int64()),
    ("warc_record_length", pa.int64()),
    ("warc_segment", pa.string()),
    # ours
    ("url_hash", pa.uint64()),
    ("crawl_status", pa.string()),
    ("warc_type", pa.string()),
    ("simhash", pa.int64()),
    ("duplicate_of", pa.string()),
    ("depth", pa.int32()),
    ("round", pa.int32()),
    ("text_length", pa.int32()),
    ("outlink_count", pa.int32()),
    ("changed", pa.bool_()),
])

TEXT_SCHEMA = pa.schema([
    ("url", pa.string()),
    ("url_hash", pa.uint64()),
    ("fetch_time", pa.timestamp("ms", tz="UTC")),
    ("content_digest", pa.string()),
    ("title", pa.string()),
    ("text", pa.string()),
    ("text_length", pa.int32()),
    ("content_languages", pa.string()),
    ("round", pa.int32()),
    ("page_count", pa.int32()),          # PDFs: the document's page count; null for HTML
])

# One row per parsed image (crawl.media): what its header says; no pixels are kept.
IMAGES_SCHEMA = pa.schema([
    ("url", pa.string()),
    ("url_hash", pa.uint64()),
    ("fetch_time", pa.timestamp("ms", tz="UTC")),
    ("content_digest", pa.string()),
    ("content_mime_detected", pa.string()),
    ("format", pa.string()),             # Pillow's name: PNG, JPEG, GIF, WEBP, BMP, TIFF
    ("width", pa.int32()),
    ("height", pa.int32()),
    ("mode", pa.string()),               # RGB, L, P, ...
    ("exif_datetime", pa.timestamp("ms")),  # EXIF DateTimeOriginal (else DateTime); naive camera time
    ("camera_make", pa.string()),
    ("camera_model", pa.string()),
    ("round", pa.int32()),
])

LINKS_SCHEMA = pa.schema([
    ("from_hash", pa.uint64()),
    ("to_hash", pa.uint64()),
    ("to_url", pa.string()),
    ("kind", pa.string()),
    ("round", pa.int32()),
])

def host_tld_and_domain(host: str | None) -> tuple[str | None, str | None]:
    """Common Crawl's ``url_host_tld`` and ``url_host_registered_domain`` of one host.

    As in Common Crawl's index, an IP address has neither (its last octet is no top-level domain);
    a name's TLD is its last label (``uk`` for ``www.bbc.co.uk``, punycode for IDNs) and its
    registered domain comes from the Public Suffix List (:func:`crawl.url.registered_domain`).
    """
    if not host or is_ip_host(host):
        return None, None
    return tld(host), registered_domain(host)


def _split_url(urls: pa.Array) -> dict[str, pa.Array]:
    cols = url_columns(urls, schemes=KNOWN_SCHEMES)  # rows of admitted URLs: any scheme the model knows
    host = cols["host"]
    # per distinct host, not per row
    enc = pc.dictionary_encode(host)
    pairs = [host_tld_and_domain(h) for h in enc.dictionary.to_pylist()]
    tlds = pa.array([t for t, _ in pairs], pa.string()).take(enc.indices)
    domains = pa.array([d for _, d in pairs], pa.string()).take(enc.indices)
    return {
        "url_protocol": cols["scheme"],
        "url_host_name": host,
        "url_port": cols["port"],
        "url_path": cols["path"],
        "url_query": cols["query"],
        "url_host_registered_domain": domains,
        "url_host_tld": tlds,
    }


def build_index(fetched: pa.Table, pages: pa.Table, dup_info: pa.Table, round_no: int) -> pa.Table:
    """Index rows for every fetch attempt that left a WARC record."""
    return with_merge_columns(index_rows(fetched, pages, round_no), dup_info)


#: The index columns that come from update's shard merges (``dup_info``: a URL's CrawlDb depth, its
#: change decision, its final status and original); every other column is known before the merges.
MERGE_COLUMNS = ("crawl_status", "duplicate_of", "depth", "changed")


def index_rows(fetched: pa.Table, pages: pa.Table, round_no: int) -> pa.Table:
    """:func:`build_index` without the merges' columns: :data:`MERGE_COLUMNS` hold the fetch row's
    status, null, its depth, null (what they are for a URL no merge saw) until
    :func:`with_merge_columns` fills them. Why split: update builds these rows (URL splitting, SURTs:
    most of the index's CPU) while its shard merges run on the workers."""
    from crawl import duck

    con = duck.connect()
    con.register("f", fetched.filter(pc.is_valid(fetched.column("warc_filename"))))
    con.register("p", pages)
    t = con.sql("""
        SELECT f.url, f.url_hash, f.fetch_time, f.http_status, f.redirect_location, f.payload_digest,
               lower(trim(split_part(f.content_type, ';', 1))) AS content_mime_type,
               p.content_mime_detected, p.content_charset, p.content_languages, f.truncated,
               f.warc_filename, f.warc_record_offset, f.warc_record_length,
               f.status, f.warc_type, p.simhash, NULL::VARCHAR AS duplicate_of, f.depth,
               p.text_length, p.outlink_count, NULL::BOOLEAN AS changed, f.subset, f.part
        FROM f LEFT JOIN p USING (url_hash)
        ORDER BY f.part, f.warc_filename, f.warc_record_offset
    """).to_arrow_table()
    con.close()
    urls = t.column("url").combine_chunks()
    split = _split_url(urls)
    digest = pc.replace_substring_regex(t.column("payload_digest"), "^sha1:", "")
    n = t.num_rows
    cols = {
        "url_surtkey": surts(urls, KNOWN_SCHEMES),
        "url": urls,
        **split,
        "fetch_time": t.column("fetch_time"),
        "fetch_status": t.column("http_status").cast(pa.int16()),
        "fetch_redirect": t.column("redirect_location"),
        "content_digest": digest,
        "content_mime_type": t.column("content_mime_type"),
        "content_mime_detected": t.column("content_mime_detected"),
        "content_charset": t.column("content_charset"),
        "content_languages": t.column("content_languages"),
        "content_truncated": t.column("truncated"),
        "warc_filename": t.column("warc_filename"),
        "warc_record_offset": t.column("warc_record_offset"),
        "warc_record_length": t.column("warc_record_length"),
        "warc_segment": pa.array([f"{round_no:05d}"] * n, pa.string()),
        "url_hash": t.column("url_hash"),
        "crawl_status": t.column("status"),
        "warc_type": t.column("warc_type"),
        "simhash": t.column("simhash"),
        "duplicate_of": t.column("duplicate_of"),
        "depth": t.column("depth"),
        "round": pa.array(np.full(n, round_no, np.int32)),
        "text_length": t.column("text_length"),
        "outlink_count": t.column("outlink_count"),
        "changed": t.column("changed"),
    }
    table = pa.Table.from_arrays([cols[f.name].cast(f.type) for f in INDEX_SCHEMA], schema=INDEX_SCHEMA)
    return table.append_column("subset", t.column("subset")).append_column("part", t.column("part"))


def with_merge_columns(rows: pa.Table, dup_info: pa.Table) -> pa.Table:
    """:func:`index_rows` with :data:`MERGE_COLUMNS` from the merges' ``dup_info`` (one row per URL
    hash): for a URL a merge saw, its status (duplicate, near-duplicate) on its stored capture, its
    original, CrawlDb depth and change decision; every other attempt (a 503 before the round's 200) keeps
    its own status, robots.txt captures theirs and no original or change. Rows keep
    their order (a lookup by URL hash, where an SQL join would reorder)."""
    hashes = dup_info.column("url_hash").combine_chunks()
    if pc.count_distinct(hashes).as_py() != len(hashes):
        raise ValueError("dup_info holds a URL hash twice: one merge row per URL expected")
    at = pc.index_in(rows.column("url_hash"), value_set=hashes)
    if not pc.any(pc.is_valid(at)).as_py():
        at = None  # nothing to look up (the empty dup_info of a round without page fetches)
    robots = pc.fill_null(pc.equal(rows.column("subset"), "robotstxt"), False)
    out = rows
    for name, source in zip(MERGE_COLUMNS, ("status", "duplicate_of", "depth", "changed"), strict=True):
        typ = rows.schema.field(name).type
        d = dup_info.column(source).take(at).cast(typ) if at is not None else pa.nulls(rows.num_rows, typ)
        if name == "crawl_status":  # a stored page capture takes the merge's (duplicate, near_duplicate);
            # every other row keeps its attempt's own: a 503 before the round's 200 of the URL stays 'retry'
            # (it read 'fetched', so summary.sql counted the URL twice), robots.txt captures keep theirs
            own = rows.column(name)
            capture = pc.fill_null(pc.and_(pc.invert(robots), pc.equal(own, "fetched")), False)
            col = pc.if_else(capture, pc.coalesce(d, own), own)
        elif name == "depth":
            col = pc.coalesce(d, rows.column(name))
        else:  # only a merge knows them, and never for robots.txt
            col = pc.if_else(robots, pa.scalar(None, typ), d)
        out = out.set_column(out.schema.get_field_index(name), name, col)
    return out


#: The columns of a partition's pages that the round's index and update read (:func:`build_index`,
#: ``crawl.update``): those of its pages part file, everything but the text and title, which only the
#: text files carry (:func:`write_part_texts`, written by the parse task).
INDEX_PAGE_COLUMNS = tuple(PAGE_PART_SCHEMA.names)


def _capture_rows(fetched: pa.Table, pages: pa.Table) -> tuple[pa.Table, pa.Table] | None:
    """Each page's stored capture (a fetch row with status ``fetched`` and a ``response`` or ``resource``
    record), as the inner join on ``url_hash`` gives them: (pages that have one, their fetch rows);
    None when a URL has several such rows (the join's duplicates: left to DuckDB).

    Why not DuckDB for the common case: the join copied every page's text into DuckDB and back
    (0.065 ms a page, as much as compressing it); here the pages are only filtered when some have no
    capture, and the fetch columns are taken by index."""
    stored = pc.and_kleene(pc.equal(fetched.column("status"), "fetched"),
                           pc.is_in(fetched.column("warc_type"), pa.array(["response", "resource"])))
    f = fetched.filter(pc.fill_null(stored, False)).select(["url_hash", "fetch_time", "payload_digest"])
    hashes = f.column("url_hash").combine_chunks()
    if pc.count_distinct(hashes).as_py() != len(hashes):
        return None
    at = pc.index_in(pages.column("url_hash"), value_set=hashes)
    has = pc.is_valid(at)
    if not pc.all(has).as_py():
        pages, at = pages.filter(has), at.filter(has)
    return pages, f.take(at)


def write_part_texts(store: Store, round_no: int, part: int, fetched: pa.Table, pages: pa.Table) -> None:
    """The text and images files of one partition (staged until publish), from its fetch rows and pages.

    Written by the parse task, on the worker, as soon as the partition is parsed: neither file depends
    on anything global to the round (a URL's fetch rows and page are in its host's one partition), and
    update then never reads or rewrites the pages' text (at 20 k pages ~115 MB, a third of update's
    time in the driver while the workers waited)."""
    joined = _capture_rows(fetched, pages) if pages.num_rows else None
    if joined is None:
        text, images = _texts_by_duckdb(fetched, pages, round_no)
    else:
        p, f = joined
        n = p.num_rows
        text = pa.table({
            "url": p.column("url"), "url_hash": p.column("url_hash"), "fetch_time": f.column("fetch_time"),
            "content_digest": f.column("payload_digest"), "title": p.column("title"), "text": p.column("text"),
            "text_length": p.column("text_length"), "content_languages": p.column("content_languages"),
            "round": pa.array(np.full(n, round_no, np.int32)), "page_count": p.column("page_count")})
        is_image = pc.is_valid(p.column("image_format"))
        p, f = p.filter(is_image), f.filter(is_image)
        images = pa.table({
            "url": p.column("url"), "url_hash": p.column("url_hash"), "fetch_time": f.column("fetch_time"),
            "content_digest": f.column("payload_digest"), "content_mime_detected": p.column("content_mime_detected"),
            "format": p.column("image_format"), "width": p.column("image_width"),
            "height": p.column("image_height"), "mode": p.column("image_mode"),
            "exif_datetime": p.column("exif_datetime"), "camera_make": p.column("camera_make"),
            "camera_model": p.column("camera_model"), "round": pa.array(np.full(p.num_rows, round_no, np.int32))})
    store.write_table(store.staged(round_no, store.text_file(round_no, part)),
                      text.select(TEXT_SCHEMA.names).cast(TEXT_SCHEMA))
    store.write_table(store.staged(round_no, store.images_file(round_no, part)),
                      images.select(IMAGES_SCHEMA.names).cast(IMAGES_SCHEMA))


def _texts_by_duckdb(fetched: pa.Table, pages: pa.Table, round_no: int) -> tuple[pa.Table, pa.Table]:
    """:func:`write_part_texts`' tables as an SQL inner join (any number of captures per URL)."""
    from crawl import duck

    con = duck.connect()
    con.register("pages", pages)
    con.register("f", fetched)
    text = con.sql(f"""
        SELECT p.url, p.url_hash, f.fetch_time, f.payload_digest AS content_digest, p.title, p.text,
               p.text_length, p.content_languages, {round_no} AS round, p.page_count
        FROM pages p JOIN (SELECT * FROM f WHERE status = 'fetched' AND warc_type IN ('response', 'resource')) f USING (url_hash)
    """).to_arrow_table()
    images = con.sql(f"""
        SELECT p.url, p.url_hash, f.fetch_time, f.payload_digest AS content_digest, p.content_mime_detected,
               p.image_format AS format, p.image_width AS width, p.image_height AS height, p.image_mode AS mode,
               p.exif_datetime, p.camera_make, p.camera_model, {round_no} AS round
        FROM pages p JOIN (SELECT * FROM f WHERE status = 'fetched' AND warc_type IN ('response', 'resource')) f USING (url_hash)
        WHERE p.image_format IS NOT NULL
    """).to_arrow_table()
    con.close()
    return text, images


def parts_of(fetch_parts: list[str]) -> list[int]:
    """The partition numbers of the round's fetch part files, in order."""
    return sorted({part_number(p) for p in fetch_parts})


def write_index(store: Store, round_no: int, parts: list[int], idx: pa.Table) -> None:
    """The index files of every partition and subset from :func:`build_index`'s rows."""
    files = []
    for part in parts:
        sel = idx.filter(pc.equal(idx.column("part"), part))
        for subset in ("warc", "crawldiagnostics", "robotstxt", "sitemap"):
            rows = sel.filter(pc.equal(sel.column("subset"), subset)).select(INDEX_SCHEMA.names)
            # no rows: removed, so a rerun with fewer rows leaves no stale file behind
            files.append((store.staged(round_no, store.index_file(subset, round_no, part)),
                          rows if rows.num_rows else None))
    store.write_tables(files)


def write_links(store: Store, round_no: int, parts: list[int], link_graph: pa.Table) -> None:
    """The links file of every partition (the round's link graph: nothing in it comes from the merges)."""
    files = []
    for part in parts:
        lp = link_graph.filter(pc.equal(link_graph.column("part"), part)) if link_graph.num_rows else link_graph
        lt = pa.table({
            "from_hash": lp.column("from_hash"), "to_hash": lp.column("to_hash"), "to_url": lp.column("to_url"),
            "kind": lp.column("kind"), "round": pa.array(np.full(lp.num_rows, round_no, np.int32)),
        })
        files.append((store.staged(round_no, store.links_file(round_no, part)), lt.cast(LINKS_SCHEMA)))
    store.write_tables(files)
