"""Real PDF, PNG and JPEG bodies of the simulated web, and what each one contains (for the truth).

What a file contains is a pure function of the web's seed and the file's content id (its size, camera,
date, page count) plus its version (pixels, text), so the server (``render.py``) and the truth export
(``truth.py``) read the same facts from here and a parser can be scored against them.

* PDF: written by hand (a dozen objects, a correct ``xref`` table) rather than with pypdf's writer,
  because pypdf cannot draw text and the crawler's parser must not be graded by the library that made
  the file. Helvetica with WinAnsiEncoding, one ``Tj`` per line, ``/Info /Title``, 1-4 pages and
  ``/Link`` annotations with ``/URI`` actions (absolute URLs, plus one ``mailto:`` that is no crawl
  link) spread over the pages.
* Images: Pillow writes PNG and JPEG of a known width and height (16-320 x 16-240); two thirds of the
  JPEGs carry EXIF (``DateTimeOriginal``, and ``Make``/``Model`` on half of those).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

PDF_WORDS_PER_PAGE = 120
PDF_LINE_CHARS = 90
CAMERAS = (("Canon", "Canon EOS R5"), ("NIKON CORPORATION", "NIKON Z 6_2"), ("Apple", "iPhone 13"),
           ("FUJIFILM", "X-T4"), ("SONY", "ILCE-7M3"))
_EXIF_FIRST = datetime(2019, 1, 1, tzinfo=UTC).timestamp()
_EXIF_SPAN_S = 6 * 365 * 86_400
EXIF_TIME_FORMAT = "%Y:%m:%d %H:%M:%S"


@dataclass(frozen=True)
class ImageSpec:
    """What an image file of the simulated web is: format, size and the EXIF it carries."""

    format: str                     # PNG | JPEG (Pillow's names)
    width: int
    height: int
    exif_datetime: datetime | None  # DateTimeOriginal (EXIF has no time zone: naive)
    camera_make: str | None
    camera_model: str | None


def _rng(seed: int, *purpose: int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, *purpose])


def image_spec(seed: int, content: int, jpeg: bool) -> ImageSpec:
    """The image of content id ``content``: the same for every version and every mirror."""
    rng = _rng(seed, 31, content)
    w, h = int(rng.integers(16, 321)), int(rng.integers(16, 241))
    if not jpeg:
        return ImageSpec("PNG", w, h, None, None, None)
    u = float(rng.random())
    when = datetime.fromtimestamp(_EXIF_FIRST + int(rng.integers(0, _EXIF_SPAN_S)), UTC).replace(tzinfo=None)
    make, model = CAMERAS[int(rng.integers(0, len(CAMERAS)))]
    if u < 1 / 3:  # no EXIF at all
        return ImageSpec("JPEG", w, h, None, None, None)
    if u < 2 / 3:  # date only
        return ImageSpec("JPEG", w, h, when, None, None)
    return ImageSpec("JPEG", w, h, when, make, model)


def image_bytes(spec: ImageSpec, seed: int, content: int, version: int) -> bytes:
    """The file: a smooth gradient whose colours change with the version (small, deterministic)."""
    from PIL import Image

    rng = _rng(seed, 23, content, version)
    c0, c1 = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    t = (np.arange(spec.width)[None, :] + np.arange(spec.height)[:, None]) / max(1, spec.width + spec.height - 2)
    px = (c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]).astype(np.uint8)
    img = Image.fromarray(px, "RGB")
    buf = io.BytesIO()
    if spec.format == "PNG":
        img.save(buf, "PNG")
        return buf.getvalue()
    exif = Image.Exif()
    if spec.exif_datetime is not None:
        stamp = spec.exif_datetime.strftime(EXIF_TIME_FORMAT)
        exif[0x0132] = stamp                    # DateTime (IFD0)
        exif.get_ifd(0x8769)[0x9003] = stamp    # DateTimeOriginal (Exif IFD)
    if spec.camera_make:
        exif[0x010F] = spec.camera_make
        exif[0x0110] = spec.camera_model
    img.save(buf, "JPEG", quality=80, **({"exif": exif.tobytes()} if len(exif) else {}))
    return buf.getvalue()


# ---- PDF -------------------------------------------------------------------------------------------------

def pdf_page_count(seed: int, content: int) -> int:
    return int(_rng(seed, 32, content).integers(1, 5))


def pdf_lines(words: list[str], pages: int) -> list[list[str]]:
    """Words packed into lines of at most PDF_LINE_CHARS characters, spread evenly over ``pages``."""
    lines: list[str] = []
    cur = ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > PDF_LINE_CHARS:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    per = -(-len(lines) // pages) if lines else 0
    return [lines[i * per:(i + 1) * per] for i in range(pages)]


def _pdf_string(s: str) -> bytes:
    """A PDF literal string in WinAnsi (cp1252) with ``\\``, ``(`` and ``)`` escaped."""
    raw = s.encode("cp1252", errors="replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def pdf_bytes(title: str, page_lines: list[list[str]], links: list[str]) -> bytes:
    """A valid PDF 1.4: catalog, page tree, one font, an Info title, per page a text stream and its
    link annotations (``links`` spread round-robin over the pages, a ``mailto:`` one on page 1)."""
    n_pages = len(page_lines)
    objs: dict[int, bytes] = {}
    objs[3] = b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica/Encoding/WinAnsiEncoding>>"
    objs[4] = b"<</Title" + _pdf_string(title) + b"/Producer(recrawl simweb)>>"
    next_id = 5
    kids = []
    for i, lines in enumerate(page_lines):
        page_id, content_id = next_id, next_id + 1
        next_id += 2
        kids.append(page_id)
        ops = [b"BT /F1 10 Tf 12 TL 72 750 Td"]
        for j, line in enumerate(lines):
            ops.append((b"T* " if j else b"") + _pdf_string(line) + b" Tj")
        ops.append(b"ET")
        stream = b"\n".join(ops)
        objs[content_id] = b"<</Length %d>>stream\n" % len(stream) + stream + b"\nendstream"
        uris = links[i::n_pages] + (["mailto:editor@sim.test"] if i == 0 else [])
        annot_ids = []
        for k, uri in enumerate(uris):
            y = 60 + 14 * k
            objs[next_id] = (b"<</Type/Annot/Subtype/Link/Rect[72 %d 300 %d]/Border[0 0 0]/A<</S/URI/URI"
                             % (y, y + 12) + _pdf_string(uri) + b">>>>")
            annot_ids.append(next_id)
            next_id += 1
        annots = b"/Annots[" + b" ".join(b"%d 0 R" % a for a in annot_ids) + b"]" if annot_ids else b""
        objs[page_id] = (b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Resources<</Font<</F1 3 0 R>>>>"
                         b"/Contents %d 0 R" % content_id + annots + b">>")
    objs[1] = b"<</Type/Catalog/Pages 2 0 R>>"
    objs[2] = b"<</Type/Pages/Kids[" + b" ".join(b"%d 0 R" % k for k in kids) + b"]/Count %d>>" % n_pages
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for oid in sorted(objs):
        offsets[oid] = len(out)
        out += b"%d 0 obj\n" % oid + objs[oid] + b"\nendobj\n"
    xref = len(out)
    size = max(objs) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for oid in range(1, size):
        out += b"%010d 00000 n \n" % offsets[oid]
    out += b"trailer\n<</Size %d/Root 1 0 R/Info 4 0 R>>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)
