"""Fingerprints: digests, SimHash near-duplicate behaviour and cross-process determinism."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawl.fingerprint import (
    fingerprints,
    hamming,
    hamming_array,
    normalise_text,
    payload_digest,
    simhash,
    text_digest,
    word_hashes,
)

REPO = Path(__file__).resolve().parent.parent


def _vocab(seed: int, size: int = 3000) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 11))) for _ in range(size)]


VOCAB = _vocab(7)


def _article(seed: int, words: int = 800) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(words):
        w = rng.choice(VOCAB)
        out.append(w.capitalize() + "." if i % 17 == 16 else w)
    return " ".join(out)


def test_payload_digest_convention() -> None:
    assert payload_digest(b"abc") == "sha1:" + base64.b32encode(hashlib.sha1(b"abc").digest()).decode()


def test_text_digest_ignores_case_and_whitespace_only() -> None:
    a = "Hello   World\n\tfrom  the\u00a0crawler"
    b = "hello world from the crawler"
    assert normalise_text(a) == b
    assert text_digest(a) == text_digest(b)
    assert len(text_digest(a)) == 32
    assert text_digest(b) == base64.b32encode(hashlib.sha1(b.encode()).digest()).decode()
    assert text_digest("hello world, from the crawler") != text_digest(b)


def test_word_hashes_tokenise_case_insensitively() -> None:
    w = word_hashes("Foo, bar! FOO_baz   bar\tfoo")
    assert w.dtype == np.uint64 and w.size == 5
    assert w[0] == w[4] and w[1] == w[3] and w[0] != w[1] and w[2] not in (w[0], w[1])
    # non-ASCII letters stay inside a word
    assert word_hashes("größe straße").size == 2
    assert word_hashes("  ,.;  ").size == 0


def test_identical_text_identical_hash_and_range() -> None:
    t = _article(1)
    assert simhash(t) == simhash(str(t))
    assert simhash(t) == simhash(t.upper())  # case-insensitive features
    values = [simhash(_article(s)) for s in range(40)]
    assert all(-(2**63) <= v < 2**63 for v in values)
    assert any(v < 0 for v in values) and any(v > 0 for v in values)  # signed int64 view of 64 bits


def test_short_text_has_no_fingerprint() -> None:
    assert simhash("") == 0
    assert simhash("two words") == 0
    assert simhash("!!! ... ???") == 0
    assert simhash("now three words") != 0


def test_small_edits_are_near_duplicates() -> None:
    """On a fixed corpus of 20 long articles (2,000 words of random-vocabulary text, the worst case:
    every shingle is unique). SimHash distance of a small edit is a random variable, so the ad case
    asserts the share within 3 rather than every article (measured: 15 of 20, max 5)."""
    ad = "Buy the new phone today with free shipping and a discount code".split()
    date_d, ad_d, footer_d = [], [], []
    for seed in range(20):
        words = _article(1000 + seed, 2000).split()
        date_d.append(hamming(simhash(" ".join(["Published", "2026-11-29", *words])),
                              simhash(" ".join(["Published", "2026-11-30", *words]))))
        ad_d.append(hamming(simhash(" ".join(words)), simhash(" ".join(words[:1000] + ad + words[1000:]))))
        footer_d.append(hamming(simhash(" ".join([*words, "Copyright", "2025"])),
                                simhash(" ".join([*words, "Copyright", "2026"]))))
    assert max(date_d) <= 3
    assert max(footer_d) <= 3
    assert sum(d <= 3 for d in ad_d) >= 15 and sorted(ad_d)[10] <= 2 and max(ad_d) <= 6


def test_unrelated_texts_are_far_apart() -> None:
    fps = [simhash(_article(100 + i)) for i in range(30)]
    dists = [hamming(a, b) for a, b in itertools.combinations(fps, 2)]
    assert min(dists) > 10
    assert 26 <= sum(dists) / len(dists) <= 38  # ~32 for independent 64-bit fingerprints


def test_hamming_scalar_and_vector() -> None:
    assert hamming(0, -1) == 64
    assert hamming(-1, 2**64 - 1) == 0
    assert hamming(0b1011, 0b0001) == 2
    a = np.array([0, -1, 5], dtype=np.int64)
    assert hamming_array(a, 0).tolist() == [0, 64, 2]
    assert hamming_array(a, np.array([0, 0, 4], dtype=np.int64)).tolist() == [0, 64, 1]


def test_deterministic_across_processes() -> None:
    """Fingerprints are persisted and compared across rounds: no per-process seed may leak in."""
    texts = [_article(3), "Grüße aus Köln — ein kurzer Satz mit Umlauten und mehr Wörtern", "a b c d e f"]
    here = [simhash(t) for t in texts]
    code = (
        "import sys, json; from crawl.fingerprint import simhash; "
        "print(json.dumps([simhash(t) for t in json.load(sys.stdin)]))"
    )
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts), capture_output=True,
                             text=True, env=env, timeout=60, check=True)
        assert json.loads(out.stdout) == here


def test_golden_value() -> None:
    """Pins the algorithm: changing it silently would break near-dup search against stored rounds."""
    assert simhash("the quick brown fox jumps over the lazy dog") == 6409478894572774095


# ------------------------------------------------------------------ the one-pass pair used by parse
_POOL = [*"abcXYZ09_ .,-'", "\t", "\n", "\x1c", "\x1f", "\x0b",
         "é", "É", "e\u0301", "\u0301", "\u0308", "\u0323", "\u0345", "\u0344", "\u3099", "\u0f73",  # marks
         "…", "™", "\xa0", "\u2000", "\u202f", "\u3000", "\u2028", "\u2029", "\x85", "\u1680",    # NFKC / spaces
         "\u1100", "\u1161", "\u11a8", "가", "\u0cd5", "ಿ", "\u0b47", "\u0b3e",  # compose with a class-0 char
         "ﬁ", "\ufb01", "Σ", "ς", "İ", "ß", "Å", "\u212b", "\u2126", "①", "Ⅻ", "ｶ", "か", "\u1e9b", "\u00b4",
         "“", "”", "€", "ŀ", "ŉ", "ſ", "\u00aa", "\u00b5", "\u00bd", "ǅ", "Ǆ", "\ud800"]


def _old_normalise(text: str) -> str:
    """The definition the text digest pins: NFKC of the whole text, lowercased, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def test_fingerprints_pair_equals_the_scalar_definitions_on_adversarial_text() -> None:
    """``fingerprints`` normalises only the unsafe runs and collapses whitespace on bytes; on text built
    from composing marks, Hangul jamo, compatibility characters and every kind of whitespace it must
    give exactly what whole-text NFKC and ``simhash`` give."""
    rng = random.Random(4)
    checked = changed = 0
    for _ in range(6000):
        text = "".join(rng.choice(_POOL) for _ in range(rng.randint(0, 40)))
        if "\ud800" in text:  # a lone surrogate: the digest cannot encode it, as before
            with pytest.raises(UnicodeEncodeError):
                text_digest(text)
            with pytest.raises(UnicodeEncodeError):
                fingerprints(text)
            continue
        want_norm = _old_normalise(text)
        assert normalise_text(text) == want_norm, repr(text)
        want_digest = base64.b32encode(hashlib.sha1(want_norm.encode()).digest()).decode()
        assert fingerprints(text) == (simhash(text), want_digest), repr(text)
        assert text_digest(text) == want_digest
        checked += 1
        changed += unicodedata.normalize("NFKC", text) != text
    assert checked > 4000 and changed > 2000  # both the pass-through and the normalising path ran


def test_fingerprints_on_long_pages_match() -> None:
    base = _article(11, 3000) + " Caf\u00e9 na\u00efve \u201cquoted\u201d \u20ac5 "
    for extra in ("", " trade\u2122 mark\u2026 ", "\xa0nbsp ﬁne \u2028 line", "e\u0301 \u1100\u1161 "):
        text = (base + extra) * 3
        want = base64.b32encode(hashlib.sha1(_old_normalise(text).encode()).digest()).decode()
        assert fingerprints(text) == (simhash(text), want)


def test_every_stand_alone_replacement_holds_next_to_any_neighbour() -> None:
    """The characters NFKC maps one by one (``_REPLACE``) and the safe ones kept as they are
    (``_SAFE``): next to composing marks, jamo, other replaceable and safe characters, whole-text NFKC
    must agree with the piecewise one."""
    from crawl.fingerprint import _REPLACE, _SAFE, _nfkc

    assert "\u2026" in _REPLACE and "\u2122" in _REPLACE and "\u00e9" in _SAFE and "\u0301" not in _SAFE
    neighbours = ["", "a", "e", " ", "\u0301", "\u0308\u0323", "\u1161", "\u11a8", "\u0b3e", "\u3099", "\u00e9",
                  "\u2026", "\u00a8", "\ufb01", "\u1100", "\u2028"]
    for c in [*_REPLACE, *_SAFE[::7]]:
        for left in neighbours:
            for right in neighbours:
                text = f"x{left}{c}{right}y"
                assert _nfkc(text) == unicodedata.normalize("NFKC", text), repr(text)


def test_fingerprints_many_equals_the_scalar_definitions_across_batches() -> None:
    """parse fingerprints a partition's texts in batches (NUL-joined bytes, shingles cut at text
    boundaries, bits counted per text): every text must get exactly ``simhash`` and ``text_digest``,
    whatever its neighbours in the batch -- short, empty, whitespace-only, NUL-holding, long, with
    leading and trailing whitespace -- and batches must split anywhere."""
    from crawl import fingerprint

    rng = random.Random(9)
    texts: list[str | None] = []
    for k in range(1500):
        r = rng.random()
        if r < 0.05:
            texts.append(rng.choice(["", None, " ", "\t\n ", "a", "a b", "a b c", "\x00", "x\x00y z w"]))
        elif r < 0.15:
            texts.append(_article(k, rng.randint(50, 3000)) + rng.choice(["", " ", "  \n", "\x1c", " …"]))
        else:
            pool = [p for p in _POOL if p != "\ud800"] + [" word ", "\x00", "  "]
            texts.append("".join(rng.choice(pool) for _ in range(rng.randint(0, 60))))
    want = [(simhash(t), text_digest(t)) if t else (0, None) for t in texts]
    for batch_bytes in (1, 200, 1 << 15):  # every text alone, a few per batch, many per batch
        old = fingerprint._BATCH_BYTES
        fingerprint._BATCH_BYTES = batch_bytes
        try:
            sims, digests = fingerprint.fingerprints_many(texts)
        finally:
            fingerprint._BATCH_BYTES = old
        assert sims.dtype == np.int64
        got = list(zip(sims.tolist(), digests, strict=True))
        bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
        assert not bad, (batch_bytes, [(texts[i][:40], got[i], want[i]) for i in bad[:3]])
    assert sum(s != 0 for s, _ in want) > 1000


def test_unicode_whitespace_list_is_every_whitespace_beyond_ascii() -> None:
    """The byte paths (``collapse_ascii_ws``, ``has_unicode_ws``) and the NFKC quick check rely on
    ``_UNICODE_WS`` being exactly what ``str.split()`` splits on beyond ASCII, and on NFKC mapping all
    of it but ``_NFKC_STABLE_WS`` to something else; a Python with a newer Unicode must still agree."""
    from crawl.fingerprint import _NFKC_STABLE_WS, _UNICODE_WS

    everything = {chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000 and chr(c).isspace()}
    assert set(_UNICODE_WS) == everything
    assert {c for c in _UNICODE_WS if unicodedata.normalize("NFKC", c) == c} == set(_NFKC_STABLE_WS)


_WS_HEAVY = st.lists(st.sampled_from([" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x00", "a", "B", "é",
                                     "\u2019", "\u2026", "\u2028", "\xa0", "\x85", "\u3000", "\u1680", "\u200a",
                                     "\u200b", "\u20ac", "\u0301", "\U0001f600", "x y", "e\u0301"]),
                     max_size=60).map("".join)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.text(max_size=80), _WS_HEAVY))
def test_byte_collapse_equals_str_split(text: str) -> None:
    """``collapse_ws`` on UTF-8 bytes gives ``" ".join(text.split())``'s bytes, whitespace beyond ASCII
    included; told there is none (``unicode_ws=False``), too when there is none."""
    from crawl.fingerprint import _UNICODE_WS, collapse_ws

    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates never reach the byte paths
        return
    want = " ".join(text.split()).encode("utf-8")
    assert collapse_ws(data) == want
    if not any(c in _UNICODE_WS for c in text):
        assert collapse_ws(data, unicode_ws=False) == want


def test_byte_collapse_every_whitespace_next_to_multibyte_neighbours() -> None:
    """Each of the 29 whitespace characters, alone, in runs and between two- to four-byte characters
    whose bytes look like its own (C2, E1-E3 leads; 80, 85, A0 continuation bytes)."""
    from crawl.fingerprint import _UNICODE_WS, collapse_ws

    neighbours = ["", "a", " ", "\u00c2", "\u0100", "\u2019", "\u2030", "\u1f80", "\u3001", "\u0085x", "\ue000",
                  "\U0001f600", "\u00a9", "\u2060"]
    for ws in [*_UNICODE_WS, "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f", " "]:
        for left in neighbours:
            for right in neighbours:
                for text in (f"{left}{ws}{right}", f"{ws}{left}{ws}{ws}{right}{ws}", f"x{left}{ws} {ws}{right}y"):
                    assert collapse_ws(text.encode()) == " ".join(text.split()).encode(), repr(text)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=50), _WS_HEAVY), max_size=8))
def test_fingerprints_many_equals_whole_text_nfkc_hypothesis(texts: list[str | None]) -> None:
    """Whatever path a text takes (ASCII, NFKC quick check, piecewise NFKC, byte or ``str`` collapse),
    the digest is whole-text NFKC + lower + collapse and the SimHash is :func:`simhash`."""
    from crawl.fingerprint import fingerprints_many

    texts = [t for t in texts if t is None or not any(0xD800 <= ord(c) < 0xE000 for c in t)]
    sims, digests = fingerprints_many(texts)
    for t, s, d in zip(texts, sims.tolist(), digests, strict=True):
        if not t:
            assert (s, d) == (0, None)
            continue
        want = base64.b32encode(hashlib.sha1(_old_normalise(t).encode()).digest()).decode()
        assert (s, d) == (simhash(t), want), repr(t)


def test_replaced_lower_equals_whole_text_nfkc_for_every_replacement() -> None:
    """The byte path for texts whose NFKC changes are one-by-one replacements: every ``_REPLACE``
    character, between cased ASCII, safe letters and capital letters whose lowercase changes length
    (İ, Kelvin sign, ẞ) or depends on neighbours (Σ), gives whole-text NFKC + lower exactly; and it
    does run (returns bytes) for the plain cases."""
    from crawl.fingerprint import _REPLACE, _SAFE, _digest_bytes, _replaced_lower

    ran = 0
    neighbours = ["A", "\u00c9", "\u00e9", "\u0130", "\u212a", "\u1e9e", "\u03a3", "A\u03a3", "\u03c3", "\u2026", " ", "\u00a0",
                  "\u0301", "\U0001f600", "\u0100", "Z"]
    for c in [*_REPLACE, *_SAFE[::5]]:
        for left in neighbours:
            text = f"Word {left}{c}Tail \u2122 \u00c0x"
            raw = text.lower().encode()
            want = " ".join(unicodedata.normalize("NFKC", text).lower().split()).encode()
            assert _digest_bytes(text, raw) == want, repr(text)
            got = _replaced_lower(raw, len(text.lower()) == len(text))
            assert got is None or got == unicodedata.normalize("NFKC", text).lower().encode(), repr(text)
            ran += got is not None
    assert ran > 3000


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(["a", "B", " ", "\n", "\u00e9", "\u00c9", "\u2026", "\u2122", "\ufb01", "\uff21",
                                 "\u00bd", "\u0130", "\u212a", "\u03a3", "\u03f9", "\u1e9e", "\u0301", "\u00a0",
                                 "\u3000", "\U0001f600", "\u2028", "\u0149", "\u01c4", "\u2126", "x.y"]),
                max_size=40).map("".join))
def test_digest_bytes_equals_whole_text_nfkc(text: str) -> None:
    from crawl.fingerprint import _digest_bytes

    want = " ".join(unicodedata.normalize("NFKC", text).lower().split()).encode()
    assert _digest_bytes(text, text.lower().encode()) == want
