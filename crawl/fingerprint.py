"""Content fingerprints: exact payload digests and near-duplicate SimHash.

``payload_digest`` follows the WARC / Common Crawl convention (``sha1:`` + base32 of the SHA-1 of the
stored payload) so our index can be joined against any Common Crawl tooling. The SimHash and text
digest live in the same module because both answer "have we stored this content before?".
"""

from __future__ import annotations

import base64
import hashlib


def payload_digest(data: bytes) -> str:
    """``sha1:BASE32`` of ``data``, the form used in ``WARC-Payload-Digest`` and CC's ``content_digest``."""
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


__all__ = ["payload_digest"]
