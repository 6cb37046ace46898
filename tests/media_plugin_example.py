"""A user's parser plugin, as a package outside ``crawl`` would ship it (loaded through config in
tests/test_media.py): it claims ``application/octet-stream`` and records the size and SHA-1 of each
binary file as its text."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from crawl.parse import ParsedDoc, parser


@parser("application/octet-stream")
def parse_octets(url: str, payload: bytes, headers: Mapping[str, str]) -> ParsedDoc:
    return ParsedDoc(title="binary file", text=octets_text(payload))


def octets_text(payload: bytes) -> str:
    return f"octets={len(payload)} sha1={hashlib.sha1(payload).hexdigest()}"


def not_a_parser(url: str, payload: bytes, headers: Mapping[str, str]) -> ParsedDoc:
    """Undecorated: no MIME types, so loading it by config is refused."""
    return ParsedDoc()
