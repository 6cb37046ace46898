"""WARC/1.1 files with per-record gzip, written atomically, read back by byte range.

Why per-record gzip: every record is its own gzip member, so ``(warc_filename, warc_record_offset,
warc_record_length)`` in the page index is enough to fetch one capture with a single range request, as
Common Crawl users do. Why write to a temporary file and move it at ``close()``: a task that crashes
mid-file must never leave a torn WARC at the published path, and a rerun of the same task (same
deterministic path) simply overwrites the earlier attempt.

FTP captures (:mod:`crawl.ftp`) have no HTTP exchange: they are ``resource`` records whose block is
the file (or the raw directory listing) and whose ``Content-Type`` is guessed from the file name.

Header policy for ``response`` records: the payload is stored *decoded* (after Content-Encoding and
Transfer-Encoding were undone by the HTTP client), so keeping ``Content-Encoding: gzip`` or
``Transfer-Encoding: chunked`` would make the record lie about its body. Like Common Crawl we rename
those headers (and the original ``Content-Length``) to ``X-Crawler-<Name>`` and add a
``Content-Length`` equal to the stored payload's length. Every other header is kept as received, in
order. ``revisit`` records carry the response headers only (renamed the same way), no payload.

Revisits (WARC 1.1 §6.7) come in the two profiles Heritrix writes: identical-payload-digest (a 200
whose body is already stored) and server-not-modified (a 304 to a conditional GET; its block is the
304's status line and headers). Both name the ``response`` record that holds the payload (the first
capture of its digest) in ``WARC-Refers-To-Target-URI`` and ``WARC-Refers-To-Date`` and carry its
``WARC-Payload-Digest``, so a replay tool (pywb) resolves either the same way.

A process killed mid-write leaves a hidden ``.<name>.*.tmp`` file next to the target (local roots) or
in the system temp dir (remote roots); it never matches ``*.warc.gz`` and can be deleted at leisure.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import IO, NamedTuple

import fsspec
from fsspec.implementations.local import LocalFileSystem
from isal import isal_zlib
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders

from crawl.fingerprint import b32_sha1, payload_digest
from crawl.url import parse_url

SOFTWARE = "recrawl/0.1"
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"  # WARC 1.1 §6.7.2
# Per-record gzip level, of ISA-L's deflate (levels 0-3). On the simulated web's pages (~20 KB) a
# request+response pair costs 0.06 ms at ISA-L level 1 against 0.20 ms at zlib's level 1, and comes
# out ~1 % smaller (zlib-ng level 1: 0.09 ms, 30 % larger); on the fetch path CPU is the scarcer resource.
GZIP_LEVEL = 1
_WRITE_BUFFER = 256 << 10  # bytes buffered before a write() to the file being written
_RECORD_BUFFER_MAX = 4 << 20  # largest record laid out in a file's reused buffer (WarcFile._append)
# Headers that describe the wire encoding, not the stored (decoded) payload.
_RENAMED_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


class RecordRef(NamedTuple):
    """Where a record landed: the byte range of its gzip member in the final file. (A named tuple:
    made twice a page on the fetch's WARC writer thread, 0.5 µs against a frozen dataclass's 1.6.)"""

    offset: int
    length: int
    record_id: str
    digest: str | None


@dataclass
class WarcRecordData:
    """One record read back. ``http_status`` is 0 for records without an HTTP status line."""

    warc_type: str
    url: str | None
    http_status: int
    http_headers: list[tuple[str, str]]
    payload: bytes
    warc_headers: dict[str, str]
    offset: int = -1
    length: int = -1
    http_reason: str = field(default="")


@functools.lru_cache(maxsize=256)
def warc_date(dt: datetime) -> str:
    """WARC-Date with millisecond precision (WARC 1.1 allows fractions).

    Milliseconds because fetch records store ``timestamp[ms]``: a revisit's ``WARC-Refers-To-Date``
    rebuilt from the index then equals the original record's ``WARC-Date`` exactly. Naive datetimes
    are taken as UTC. Cached: a page's request and response records share their fetch time.
    """
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _warc_fields(fetch_time: datetime, ip: str | None,
                 extra: tuple[tuple[str, str | None], ...]) -> list[tuple[str, str]]:
    """Record id, date, IP address and any of ``extra`` that are set, in warcio's order."""
    fields = [("WARC-Record-ID", _record_id()), ("WARC-Date", warc_date(fetch_time))]
    if ip:
        fields.append(("WARC-IP-Address", ip))
    fields += [(k, v) for k, v in extra if v]
    return fields


def _record_id() -> str:
    """``<urn:uuid:…>`` of a random (version 4) UUID, as ``str(uuid.uuid4())`` spells it."""
    return _uuid4_urn(os.urandom(16))


def _uuid4_urn(raw: bytes) -> str:
    """The record id of the version-4 UUID made from 16 random bytes ``raw`` (``uuid.UUID(bytes=raw,
    version=4)``). Why not ``uuid.uuid4()``: building the UUID object cost 4.4 µs, this 1.8, two per
    page on the WARC writer thread."""
    h = raw.hex()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}>"


def _sha1(*parts: bytes) -> str:
    """``sha1:BASE32`` over the concatenation of ``parts`` (the WARC digest form, as payload digests)."""
    h = hashlib.sha1(parts[0])
    for p in parts[1:]:
        h.update(p)
    return "sha1:" + b32_sha1(h.digest())


_EMPTY_DIGEST = _sha1(b"")  # a request record's payload digest (warcio wrote it too)


def _http_block(statusline: str, headers: list[tuple[str, str]]) -> bytes:
    """The HTTP status line and headers of a record's block, as warcio encodes them: ASCII, or, when a
    header is not, warcio's own percent-encoding of the non-ASCII values (RFC 8187)."""
    text = "".join([statusline, "\r\n", *[f"{k}: {v}\r\n" for k, v in headers], "\r\n"])
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        return StatusAndHeaders(statusline, list(headers)).to_ascii_bytes()


def _response_block(statusline: str, headers: list[tuple[str, str]], payload_len: int) -> bytes:
    """:func:`_http_block` of :func:`_response_headers` (the wire headers renamed, then the stored
    payload's Content-Length), spelled in one pass: each header name's line prefix is looked up
    (:func:`_stored_name`) instead of lowering the name and rebuilding the header list per record
    (~0.7 us of the WARC writer thread's ~1.8 a response)."""
    names = _STORED_NAMES
    text = "".join([statusline, "\r\n", *[f"{names.get(k) or _stored_name(k)}{v}\r\n" for k, v in headers],
                    f"Content-Length: {payload_len}\r\n\r\n"])
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        return StatusAndHeaders(statusline, _response_headers(headers, payload_len)).to_ascii_bytes()


def _record_head(fields: list[tuple[str, str]], content_type: str, length: int) -> str:
    """A record's header lines: ``WARC/1.1``, ``fields``, Content-Type and Content-Length (``length``:
    the block's), and the blank line before the block."""
    return ("WARC/1.1\r\n" + "".join([f"{k}: {v}\r\n" for k, v in fields])
            + f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n")


def _line(name: str, value: str | None) -> str:
    """One optional header line, left out when ``value`` is empty (as :func:`_warc_fields` does)."""
    return f"{name}: {value}\r\n" if value else ""


def _gzip(data: bytes | memoryview) -> bytes:
    """``data`` as one gzip member (ISA-L's deflate at :data:`GZIP_LEVEL`)."""
    return isal_zlib.compress(data, GZIP_LEVEL, 31)


def _renamed(name: str) -> str:
    """A wire header's name as a response record stores it: the ones describing the wire encoding
    (:data:`_RENAMED_HEADERS`) get ``X-Crawler-``, since the stored payload is decoded."""
    return "X-Crawler-" + name if name.lower() in _RENAMED_HEADERS else name


def _response_headers(headers: list[tuple[str, str]], payload_len: int) -> list[tuple[str, str]]:
    return [*((_renamed(name), value) for name, value in headers), ("Content-Length", str(payload_len))]


_STORED_NAMES: dict[str, str] = {}  # wire header name -> "its stored name: " (_stored_name)
_STORED_NAMES_MAX = 4096  # distinct names remembered (a hostile server may send new ones every time)


def _stored_name(name: str) -> str:
    """``"<name>: "`` as a response record stores the header ``name`` (:func:`_response_headers`'
    renaming), remembered for the next record."""
    line = _renamed(name) + ": "
    if len(_STORED_NAMES) < _STORED_NAMES_MAX:
        _STORED_NAMES[name] = line
    return line


_VERBATIM = re.compile(r"[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?|")


def stored_response_headers(headers: list[tuple[str, str]], payload_len: int) -> list[tuple[str, str]] | None:
    """The HTTP headers :func:`iter_records` gives back for a ``response`` record written with
    ``headers`` and a payload of ``payload_len`` bytes; None when the round trip may not be verbatim.

    Why: the fetch task parses the bodies it just downloaded (crawl.tasks) and must see exactly what a
    parse of the WARC file would. Renaming (:func:`_response_headers`) is the same code; what the
    round trip changes is text outside printable ASCII (warcio percent-encodes it) and whitespace
    around a value (the reader strips it), so a name or value with either gives None and the caller
    reads that record back from the file instead.
    """
    out = _response_headers(headers, payload_len)
    for name, value in out:
        if not (_VERBATIM.fullmatch(name) and _VERBATIM.fullmatch(value)):
            return None
    return out


# An http(s) URL whose path and query the WHATWG parser keeps as written: a lower-case host name with
# no port or user info, then only characters no percent-encode set holds ("'" is encoded in a special
# URL's query, so it is left out there), no dot segment (checked apart) and no fragment.
_PLAIN_URL = re.compile(r"https?://[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z][a-z0-9-]*"
                        r"(/[A-Za-z0-9._~!$&'()*+,;=:@/%-]*)?(?:\?([A-Za-z0-9._~!$&()*+,;=:@/?%-]*))?")
_DOT_SEGMENT = re.compile(r"/(?:\.|%2e){1,2}(?:/|$)", re.IGNORECASE)


def _request_target(url: str) -> str:
    """Origin-form request target (path + query) for the request line.

    A plain URL (:data:`_PLAIN_URL`, as canonical URLs of ordinary sites are) is sliced; any other is
    parsed (``crawl.url.parse_url``, ~10 µs a page on the WARC writer thread) -- the same target
    (tests/test_warc.py compares them over generated URLs)."""
    m = _PLAIN_URL.fullmatch(url)
    if m is None or "xn--" in url or _DOT_SEGMENT.search(m.group(1) or ""):
        u = parse_url(url)
        return f"{u.path}?{u.query}" if u.query else u.path
    path, query = m.group(1) or "/", m.group(2)
    return f"{path}?{query}" if query else path


def _fs_and_path(root: str, rel_path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, root_path = fsspec.core.url_to_fs(root)
    root_path = root_path.rstrip("/")
    return fs, f"{root_path}/{rel_path.lstrip('/')}" if root_path else rel_path.lstrip("/")


class WarcFile:
    """A WARC file being written; use :meth:`open` and as a context manager.

    On a clean ``close()`` the temporary file is moved to ``root/rel_path`` (``os.replace`` locally,
    ``fs.put`` for remote filesystems). Leaving the ``with`` block by an exception aborts instead: the
    temporary file is deleted and nothing is published.

    Records are serialised here (:func:`_record`) and each is gzipped as one member with ISA-L
    (:mod:`isal`). Why not warcio's writer: per page (request + response record of ~15 KB) it cost
    0.35 ms of CPU, 0.14 ms with this serialiser and ISA-L, 0.20 ms with FastWARC's ``WarcRecord``
    writer (bench/RESULTS.md, "Fetch CPU"); on the fetch path that CPU is throughput. The records are
    the ones warcio wrote, field for field and in the same order (tests/test_warc.py checks it against
    warcio's writer, and reads the files back with warcio and FastWARC).
    """

    def __init__(self, root: str, rel_path: str, user_agent: str | None = None) -> None:
        if not rel_path.endswith(".warc.gz"):
            raise ValueError(f"WARC file name must end with .warc.gz, got {rel_path!r}")
        self.root = root
        self.rel_path = rel_path
        self._fs, self._final = _fs_and_path(root, rel_path)
        self._local = isinstance(self._fs, LocalFileSystem)
        base = os.path.basename(rel_path)
        if self._local:
            # Same directory as the target so os.replace is an atomic rename; the ".tmp" suffix keeps
            # it out of any "*.warc.gz" glob.
            directory = os.path.dirname(self._final) or "."
            os.makedirs(directory, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
        else:
            fd, self._tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp")
        # a 256 KiB buffer: a record's gzip member (~8 KB for a page) mostly went straight to a write()
        # call with the default 8 KiB one; the fetch's writer thread spent ~2 us a record more in it
        self._fh: IO[bytes] = os.fdopen(fd, "wb", buffering=_WRITE_BUFFER)
        self._pos = 0  # bytes written so far: the next record's offset
        # a record's bytes are laid out here for the one-shot gzip: a fresh b"".join of a ~20 KB
        # response record per page cost ~4 us of allocation and copy more on the writer thread
        self._buf = memoryview(bytearray(64 << 10))
        self._closed = False
        info = {
            "software": SOFTWARE,
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
            "http-header-user-agent": user_agent or "",
        }
        block = "".join(f"{k}: {v}\r\n" for k, v in info.items() if v).encode("utf-8")
        now = datetime.now(UTC).replace(tzinfo=None).isoformat() + "Z"
        self._write([("WARC-Type", "warcinfo"), ("WARC-Record-ID", _record_id()), ("WARC-Filename", base),
                     ("WARC-Date", now), ("WARC-Block-Digest", _sha1(block))],
                    "application/warc-fields", block, None)

    @classmethod
    def open(cls, root: str, rel_path: str, user_agent: str | None = None) -> WarcFile:
        return cls(root, rel_path, user_agent=user_agent)

    @property
    def path(self) -> str:
        """Final path (within the filesystem of ``root``)."""
        return self._final

    def _write(self, fields: list[tuple[str, str]], content_type: str, block: bytes,
               digest: str | None, payload: bytes = b"") -> RecordRef:
        """Append one record (``fields`` then Content-Type and Content-Length; the block is ``block``
        followed by ``payload``) as its own gzip member."""
        head = _record_head(fields, content_type, len(block) + len(payload))
        return self._append(head, block, payload, next(v for k, v in fields if k == "WARC-Record-ID"), digest)

    def _append(self, head: str, block: bytes, payload: bytes, record_id: str, digest: str | None) -> RecordRef:
        """Append one record whose WARC header lines (``WARC/1.1`` to the blank line) are ``head``."""
        if self._closed:
            raise ValueError("WARC file already closed")
        h = head.encode("utf-8")
        a, b, c = len(h), len(h) + len(block), len(h) + len(block) + len(payload)
        buf = self._buf
        if buf.nbytes < c + 4 <= _RECORD_BUFFER_MAX:
            buf = self._buf = memoryview(bytearray(min(max(c + 4, 2 * buf.nbytes), _RECORD_BUFFER_MAX)))
        if buf.nbytes >= c + 4:
            buf[:a] = h
            buf[a:b] = block
            buf[b:c] = payload
            buf[c:c + 4] = b"\r\n\r\n"
            member = _gzip(buf[:c + 4])
        else:  # a record larger than the buffer may grow: joined once, not kept
            member = _gzip(b"".join((h, block, payload, b"\r\n\r\n")))
        self._fh.write(member)
        start = self._pos
        self._pos += len(member)
        return RecordRef(offset=start, length=len(member), record_id=record_id, digest=digest)

    def write_request(
        self,
        url: str,
        fetch_time: datetime,
        method: str,
        headers: list[tuple[str, str]],
        ip: str | None = None,
        concurrent_to: str | None = None,
    ) -> RecordRef:
        # the header lines spelled out in one string (what _warc_fields + _record_head give for these
        # fields, in the same order): two records per page on the WARC writer thread
        block = _http_block(f"{method.upper()} {_request_target(url)} HTTP/1.1", headers)
        rec_id = _record_id()
        head = (f"WARC/1.1\r\nWARC-Record-ID: {rec_id}\r\nWARC-Date: {warc_date(fetch_time)}\r\n"
                f"{_line('WARC-IP-Address', ip)}{_line('WARC-Concurrent-To', concurrent_to)}"
                f"WARC-Type: request\r\nWARC-Target-URI: {url}\r\nWARC-Payload-Digest: {_EMPTY_DIGEST}\r\n"
                f"WARC-Block-Digest: {_sha1(block)}\r\nContent-Type: application/http; msgtype=request\r\n"
                f"Content-Length: {len(block)}\r\n\r\n")
        return self._append(head, block, b"", rec_id, None)

    def write_response(
        self,
        url: str,
        fetch_time: datetime,
        http_status: int,
        reason: str,
        headers: list[tuple[str, str]],
        payload: bytes,
        ip: str | None,
        truncated: str | None,
        concurrent_to: str | None = None,
        digest: str | None = None,
    ) -> RecordRef:
        """``digest``: the payload digest when the caller already computed it (no second SHA-1)."""
        digest = digest or payload_digest(payload)
        block = _response_block(f"HTTP/1.1 {f'{int(http_status)} {reason}'.rstrip()}", headers, len(payload))
        rec_id = _record_id()
        head = (f"WARC/1.1\r\nWARC-Record-ID: {rec_id}\r\nWARC-Date: {warc_date(fetch_time)}\r\n"
                f"{_line('WARC-IP-Address', ip)}WARC-Payload-Digest: {digest}\r\n"
                f"{_line('WARC-Truncated', truncated)}{_line('WARC-Concurrent-To', concurrent_to)}"
                f"WARC-Type: response\r\nWARC-Target-URI: {url}\r\nWARC-Block-Digest: {_sha1(block, payload)}\r\n"
                f"Content-Type: application/http; msgtype=response\r\n"
                f"Content-Length: {len(block) + len(payload)}\r\n\r\n")
        return self._append(head, block, payload, rec_id, digest)

    def write_resource(
        self,
        url: str,
        fetch_time: datetime,
        content_type: str,
        payload: bytes,
        ip: str | None,
        truncated: str | None,
        digest: str | None = None,
    ) -> RecordRef:
        """A ``resource`` record: a capture without an HTTP exchange (an FTP file or directory
        listing). The block is the payload itself, typed by ``Content-Type`` (WARC 1.1 §6.4)."""
        digest = digest or payload_digest(payload)
        fields = _warc_fields(fetch_time, ip, (("WARC-Payload-Digest", digest), ("WARC-Block-Digest", digest),
                                               ("WARC-Truncated", truncated)))
        fields += [("WARC-Type", "resource"), ("WARC-Target-URI", url)]
        return self._write(fields, content_type, payload, digest)

    def write_revisit(
        self,
        url: str,
        fetch_time: datetime,
        http_status: int | None,
        reason: str,
        headers: list[tuple[str, str]],
        payload_digest: str,
        refers_to_uri: str | None,
        refers_to_date: datetime | None,
        ip: str | None = None,
        profile: str = REVISIT_PROFILE,
    ) -> RecordRef:
        """``http_status`` None: the revisit of a ``resource`` capture (FTP), with no HTTP headers.
        ``profile``: :data:`REVISIT_PROFILE`, or :data:`REVISIT_NOT_MODIFIED` for a 304. Without
        ``refers_to_uri`` (a 304 whose stored copy is not found) both ``WARC-Refers-To-*`` fields are left
        out; the payload digest still names the copy."""
        fields = _warc_fields(fetch_time, ip, ())
        block = b"" if http_status is None else _http_block(
            f"HTTP/1.1 {f'{int(http_status)} {reason}'.rstrip()}",
            [(n if n.lower() not in _RENAMED_HEADERS else "X-Crawler-" + n, v) for n, v in headers])
        fields += [("WARC-Type", "revisit"), ("WARC-Target-URI", url), ("WARC-Profile", profile)]
        if refers_to_uri and refers_to_date is not None:
            fields += [("WARC-Refers-To-Target-URI", refers_to_uri),
                       ("WARC-Refers-To-Date", warc_date(refers_to_date))]
        fields += [("WARC-Payload-Digest", payload_digest), ("WARC-Block-Digest", _sha1(block))]
        return self._write(fields, "application/http; msgtype=response", block, payload_digest)

    def write_conversion(self, url: str, fetch_time: datetime, payload: bytes, refers_to: str,
                         content_type: str) -> RecordRef:
        """A ``conversion`` record (WARC 1.1 §6.8): content derived from another record, here the DOM a
        browser built from a response; ``WARC-Refers-To`` names that response record."""
        digest = payload_digest(payload)
        fields = _warc_fields(fetch_time, None, (("WARC-Refers-To", refers_to), ("WARC-Payload-Digest", digest)))
        # the block is the payload: its digest is the payload digest (one SHA-1 pass, as for resources)
        fields += [("WARC-Type", "conversion"), ("WARC-Target-URI", url), ("WARC-Block-Digest", digest)]
        return self._write(fields, content_type, payload, digest)

    def close(self) -> None:
        """Finish the file and publish it at its final path (replacing any earlier file)."""
        if self._closed:
            return
        self._closed = True
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        try:
            if self._local:
                os.replace(self._tmp, self._final)
            else:
                parent = self._final.rsplit("/", 1)[0] if "/" in self._final else ""
                if parent:
                    self._fs.makedirs(parent, exist_ok=True)
                self._fs.put_file(self._tmp, self._final)
        finally:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)

    def abort(self) -> None:
        """Drop everything written; nothing appears at the final path."""
        if self._closed:
            return
        self._closed = True
        self._fh.close()
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)

    def __enter__(self) -> WarcFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _to_data(record: object, offset: int = -1, length: int = -1) -> WarcRecordData:
    rec = record
    http = rec.http_headers  # type: ignore[attr-defined]
    status = 0
    reason = ""
    headers: list[tuple[str, str]] = []
    if http is not None:
        headers = list(http.headers)
        if rec.rec_type in ("response", "revisit"):  # type: ignore[attr-defined]
            code, _, reason = http.statusline.partition(" ")
            status = int(code) if code.isdigit() else 0
    # raw_stream: the payload exactly as stored (already decoded at fetch time; see module docstring).
    payload = rec.raw_stream.read()  # type: ignore[attr-defined]
    warc_headers = dict(rec.rec_headers.headers)  # type: ignore[attr-defined]
    return WarcRecordData(
        warc_type=rec.rec_type,  # type: ignore[attr-defined]
        url=warc_headers.get("WARC-Target-URI"),
        http_status=status,
        http_headers=headers,
        payload=payload,
        warc_headers=warc_headers,
        offset=offset,
        length=length,
        http_reason=reason,
    )


def read_record(root: str, rel_path: str, offset: int, length: int) -> WarcRecordData:
    """Read one record by its byte range (one range request on remote filesystems)."""
    fs, path = _fs_and_path(root, rel_path)
    data = fs.cat_file(path, start=offset, end=offset + length)
    for rec in ArchiveIterator(io.BytesIO(data)):
        return _to_data(rec, offset, length)
    raise ValueError(f"no WARC record at {rel_path}@{offset}+{length}")


def iter_records_fastwarc(root: str, rel_path: str, start: int = 0) -> Iterator[WarcRecordData]:
    """:func:`iter_records` read with FastWARC (C++): the same records, several times faster
    (bench/warcread_bench.py). The record length is the distance to the next record's offset (or the
    file's end): every record is its own gzip member, as :class:`WarcFile` writes them."""
    from fastwarc.warc import ArchiveIterator as FastIterator

    fs, path = _fs_and_path(root, rel_path)
    with fs.open(path, "rb") as fh:
        if start:
            fh.seek(start)  # FastWARC's stream positions stay those of the file
        prev: WarcRecordData | None = None
        for rec in FastIterator(fh, parse_http=True, auto_decode="none"):
            warc_headers = dict(rec.headers.asdict())
            status, reason, headers = 0, "", []
            if rec.is_http and rec.http_headers is not None:
                headers = list(rec.http_headers.astuples())
                # (an FTP revisit has an empty block: no status line, as warcio reads it)
                if str(rec.record_type) in ("response", "revisit") and rec.http_headers.status_line:
                    code, _, reason = rec.http_headers.status_line.partition(" ")[2].partition(" ")
                    status = int(code) if code.isdigit() else 0
            data = WarcRecordData(warc_type=str(rec.record_type), url=warc_headers.get("WARC-Target-URI"),
                                  http_status=status, http_headers=headers, payload=rec.reader.read(),
                                  warc_headers=warc_headers, offset=rec.stream_pos, http_reason=reason)
            if prev is not None:
                prev.length = data.offset - prev.offset
                yield prev
            prev = data
        if prev is not None:
            prev.length = fs.size(path) - prev.offset
            yield prev


def iter_records_warcio(root: str, rel_path: str) -> Iterator[WarcRecordData]:
    """:func:`iter_records` read with warcio (the reference reader)."""
    fs, path = _fs_and_path(root, rel_path)
    with fs.open(path, "rb") as fh:
        it = ArchiveIterator(fh)
        for rec in it:
            data = _to_data(rec)  # read the payload first: asking for the offset consumes the record
            data.offset = it.get_record_offset()
            data.length = it.get_record_length()
            yield data


def iter_records(root: str, rel_path: str, start: int = 0) -> Iterator[WarcRecordData]:
    """All records of a file in order (warcinfo included), each with its offset and length; from
    ``start`` on when given (the offset of a record: every record is its own gzip member).

    Read with FastWARC: the same records as warcio's reader, 2.7x less CPU (bench/warcread_bench.py);
    warcio still writes them (crawl.warc.WarcFile)."""
    return iter_records_fastwarc(root, rel_path, start)


__all__ = [
    "REVISIT_NOT_MODIFIED", "REVISIT_PROFILE", "RecordRef", "WarcFile", "WarcRecordData", "iter_records", "read_record",
    "stored_response_headers", "warc_date",
]
