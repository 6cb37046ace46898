"""Fingerprints: digests, SimHash near-duplicate behaviour and cross-process determinism."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simhash_ref import M64 as _M64
from simhash_ref import WORD_BYTES, P, mix, shingle_simhash

from crawl.fingerprint import (
    fingerprints,
    hamming,
    hamming_array,
    normalise_text,
    payload_digest,
    simhash,
    text_digest,
)

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------- an independent reference of the SimHash
# A plain-Python transcription of the algorithm crawl/fingerprint.py's docstring defines, sharing no
# code with the compiled kernel: the oracle the kernel is compared with.
def _ref_words(text: str) -> list[int]:
    """Word hashes: maximal runs of [0-9a-z_] and non-ASCII bytes of the lowered UTF-8, each
    sum(byte * P**k) mod 2**64 over its bytes, SplitMix64-mixed; the words of a sentence (ended by
    . ! or ? before whitespace, or by the end of the text) of fewer than 3 words left out."""
    words: list[int] = []
    sentence: list[int] = []
    h, k, inword, stop = 0, 0, False, False

    def end_sentence() -> None:
        if len(sentence) >= 3:
            words.extend(sentence)
        sentence.clear()

    for ch in text.lower():
        if stop and ch.isspace():
            end_sentence()
        stop = ch in ".!?"
        for byte in ch.encode("utf-8", "surrogatepass"):
            if byte in WORD_BYTES:
                h = (h + byte * pow(P, k, 1 << 64)) & _M64
                k += 1
                inword = True
            elif inword:
                sentence.append(mix(h))
                h, k, inword = 0, 0, False
    if inword:
        sentence.append(mix(h))
    end_sentence()
    return words


def _ref_simhash(text: str) -> int:
    return shingle_simhash(_ref_words(text))


def _ref_digest(text: str) -> str:
    """The text digest's definition: whole-text NFKC, lowercase, whitespace collapsed, SHA-1, base32."""
    norm = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    return base64.b32encode(hashlib.sha1(norm.encode()).digest()).decode()


# Values stored by every round before the compiled kernel (computed with the NumPy implementation
# of crawl/fingerprint.py at 4c795b7): they must never change.
_GOLDEN = [
    ("the quick brown fox jumps over the lazy dog", 6409478894572774095, "CYYSOUPPSMD4H7I27PFZSPG4QBDEXIHR"),
    ("Gr\u00fc\u00dfe aus K\u00f6ln \u2014 ein kurzer Satz mit Umlauten und mehr W\u00f6rtern\u2026",
     -7443373141177736278, "UYZTCFDT7MZWVKB5EMKFYRZIPSLQPVQ6"),
    ("Caf\u00e9\u2122 na\u00efve \u201cquoted\u201d \u20ac5 \ufb01ne \uff26\uff55\uff4c\uff4c \u00bd cup\xa0of tea",
     5876477687416078476, "F3EYP2GS542JDKRYEFD6VW7GU6EC2BIO"),
    ("\u03a3\u039f\u03a6\u0399\u0391 \u03ba\u03b1\u03b9 \u039b\u039f\u0393\u039f\u03a3 \u03c3\u03c4\u03b7\u03bd "
     "\u0391\u03b8\u03ae\u03bd\u03b1 \u03c3\u03ae\u03bc\u03b5\u03c1\u03b1", -3026064814834110460,
     "35RONNGZZ3LMQWHFFO6KX67EK7TBWEDX"),
    ("\u0130stanbul \u0130zmir KELVIN \u212a degrees", -4066198079558313462, "LIDZ3XG5SGJROHG5JXHBBTPSUNY2YJ3P"),
    ("\u5317\u4eac \u4e1c\u4eac \u9996\u5c14 \u53f0\u5317 \u9999\u6e2f", 4691509317956583114,
     "OWD6TNWGKD475Y25PXH4X4ZO3J7RO2OL"),
    ("emoji \U0001f600 party \U0001f389 time \u23f0 now", -9028121864960433470, "RMZ7JHBEYUHJYLXA2EVHXZDZD34U25VE"),
    ("e\u0301te\u0301 cafe\u0301 re\u0301sume\u0301 x y", 4242770421990950062, "JN3J75OWG2GOC47YN2VZPMCMTGLYXMUF"),
    ("a b", 0, "PW66SNIECIVHA74ET4WBFPOZ3ZY3IGJJ"),
    ("TAB\tand\x1cseparators\u2028line\u3000ideographic space", 432486903367860280, "ZWHDRMJB236DXKBXENIKVWCCZOEVCTO6"),
]


def test_golden_values_stored_before_the_kernel() -> None:
    from crawl.fingerprint import fingerprints_many

    sims, digests = fingerprints_many([t for t, _, _ in _GOLDEN])
    assert list(zip(sims.tolist(), digests, strict=True)) == [(s, d) for _, s, d in _GOLDEN]
    for text, sim, digest in _GOLDEN:
        assert (simhash(text), text_digest(text)) == (sim, digest)
        assert (_ref_simhash(text), _ref_digest(text)) == (sim, digest)  # the references agree too


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


def test_words_tokenise_case_insensitively() -> None:
    w = _ref_words("Foo, bar; FOO_baz   bar\tfoo")
    assert len(w) == 5 and w[0] == w[4] and w[1] == w[3] and w[0] != w[1] and w[2] not in (w[0], w[1])
    assert simhash("Foo, bar; FOO_baz   bar\tfoo") == simhash("foo bar foo_baz bar foo") == _ref_simhash("foo bar foo_baz bar foo") != 0
    # non-ASCII letters stay inside a word: two words, no shingle
    assert simhash("größe straße") == 0 and simhash("größe straße x") == _ref_simhash("größe straße x") != 0
    assert simhash("  ,.;  ") == 0


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


def test_short_sentences_are_left_out() -> None:
    """A sentence (ended by . ! or ? before whitespace, or by the text's end) of fewer than 3 words adds
    no words: a link call-out whose anchor parse stripped ("See ."), "Share!", a closing "Thanks." do
    not move the SimHash; a sentence of 3 words does, and so do the same words inside a longer one."""
    words = _article(7, 595).split()  # a sentence every 17 words, the last one ended
    base = " ".join(words)
    callouts = list(words)
    for i in range(16, len(callouts), 51):  # after every third sentence
        callouts[i] += " See ."
    variants = [" ".join(callouts), base + " Thanks.", "Share! " + base, base.replace(". ", ".\n\t", 3),
                base + "\nRead more?"]
    for v in variants:
        assert simhash(v) == simhash(base) == _ref_simhash(v), v[:80]
    assert simhash(base + " Three words here.") != simhash(base)
    assert simhash(base + " Thanks") == simhash(base)  # the text's end ends its last sentence
    # a stop character before a non-space ends no sentence: "version 3" and "5 ok" would be short ones
    for v in (base + " version 3.5 ok", base + " at sim.test now"):
        assert simhash(v) == _ref_simhash(v) != simhash(base)
    assert simhash("Hi. Short. Yes!") == simhash("two words") == 0
    from crawl.fingerprint import fingerprints_many

    fps, _ = fingerprints_many(["Hi. See . " + base, base, "A. " * 50 + base])
    assert fps.tolist() == [simhash(base)] * 3


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
            assert simhash(text) == _ref_simhash(text)  # hashed as surrogatepass encodes it
            continue
        want_norm = _old_normalise(text)
        assert normalise_text(text) == want_norm, repr(text)
        want_digest = base64.b32encode(hashlib.sha1(want_norm.encode()).digest()).decode()
        assert fingerprints(text) == (_ref_simhash(text), want_digest), repr(text)
        assert text_digest(text) == want_digest
        checked += 1
        changed += unicodedata.normalize("NFKC", text) != text
    assert checked > 4000 and changed > 2000  # both the pass-through and the normalising path ran


def test_fingerprints_on_long_pages_match() -> None:
    base = _article(11, 3000) + " Caf\u00e9 na\u00efve \u201cquoted\u201d \u20ac5 "
    for extra in ("", " trade\u2122 mark\u2026 ", "\xa0nbsp ﬁne \u2028 line", "e\u0301 \u1100\u1161 "):
        text = (base + extra) * 3
        want = base64.b32encode(hashlib.sha1(_old_normalise(text).encode()).digest()).decode()
        assert fingerprints(text) == (_ref_simhash(text), want)


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
    want = [(_ref_simhash(t), _ref_digest(t)) if t else (0, None) for t in texts]
    for batch_bytes in (1, 200, 1 << 15):  # every text alone, a few per batch, many per batch
        old = fingerprint._BATCH_CHARS
        fingerprint._BATCH_CHARS = batch_bytes
        try:
            sims, digests = fingerprint.fingerprints_many(texts)
        finally:
            fingerprint._BATCH_CHARS = old
        assert sims.dtype == np.int64
        got = list(zip(sims.tolist(), digests, strict=True))
        bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
        assert not bad, (batch_bytes, [(texts[i][:40], got[i], want[i]) for i in bad[:3]])
    assert sum(s != 0 for s, _ in want) > 1000


def test_unicode_whitespace_list_is_every_whitespace_beyond_ascii() -> None:
    """The byte paths (``collapse_ascii_ws``, ``has_unicode_ws``) and the NFKC quick check rely on
    ``_UNICODE_WS`` being exactly what ``str.split()`` splits on beyond ASCII, and on NFKC mapping all
    of it to something else but the few it keeps; a Python with a newer Unicode must still agree."""
    from crawl.fingerprint import _UNICODE_WS

    everything = {chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000 and chr(c).isspace()}
    assert set(_UNICODE_WS) == everything
    assert {c for c in _UNICODE_WS if unicodedata.normalize("NFKC", c) == c} == {"\x85", "\u1680", "\u2028", "\u2029"}


_WS_HEAVY = st.lists(st.sampled_from([" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x00", "a", "B", "é",
                                     "\u2019", "\u2026", "\u2028", "\xa0", "\x85", "\u3000", "\u1680", "\u200a",
                                     "\u200b", "\u20ac", "\u0301", "\U0001f600", "x y", "e\u0301"]),
                     max_size=60).map("".join)


def _collapse(text: str) -> bytes:
    from crawl.fingerprint import collapse_many

    out, off, lengths = collapse_many([text])
    got = out[:off[1]].tobytes()
    assert lengths.tolist() == [len(got.decode())]  # the text column's text_length, counted by the pass
    return got


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.text(max_size=80), _WS_HEAVY, st.text(st.characters(codec=None, exclude_categories=()), max_size=20)))
def test_byte_collapse_equals_str_split(text: str) -> None:
    """``collapse_many`` gives ``" ".join(text.split())``'s UTF-8, whitespace beyond ASCII included;
    a lone surrogate raises as ``str.encode`` does."""
    try:
        want = " ".join(text.split()).encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            _collapse(text)
        return
    assert _collapse(text) == want


def test_byte_collapse_every_whitespace_next_to_multibyte_neighbours() -> None:
    """Each of the 29 whitespace characters, alone, in runs and between two- to four-byte characters
    whose bytes look like its own (C2, E1-E3 leads; 80, 85, A0 continuation bytes)."""
    from crawl.fingerprint import _UNICODE_WS

    neighbours = ["", "a", " ", "\u00c2", "\u0100", "\u2019", "\u2030", "\u1f80", "\u3001", "\u0085x", "\ue000",
                  "\U0001f600", "\u00a9", "\u2060"]
    for ws in [*_UNICODE_WS, "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f", " "]:
        for left in neighbours:
            for right in neighbours:
                for text in (f"{left}{ws}{right}", f"{ws}{left}{ws}{ws}{right}{ws}", f"x{left}{ws} {ws}{right}y"):
                    assert _collapse(text) == " ".join(text.split()).encode(), repr(text)


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
        assert (s, d) == (_ref_simhash(t), want), repr(t)


def test_every_table_character_next_to_any_neighbour() -> None:
    """The kernel maps characters one by one through tables (lowercase, NFKC + lowercase for the
    digest): every character it maps without falling back (``_SAFE``, ``_REPLACE``, those ``str.lower``
    changes), between cased ASCII, safe letters, capital letters whose lowercase changes length (U+0130,
    the Kelvin sign, capital sharp s) or depends on neighbours (capital sigma), marks and emoji, gives
    the reference SimHash and whole-text NFKC + lower + split digest."""
    from crawl.fingerprint import _LOW_LIMIT, _REPLACE, _SAFE, _tables, fingerprints_many

    low = _tables()[0]
    cased = [chr(cp) for cp in np.flatnonzero(low[:0x10000] != np.arange(0x10000))]
    assert len(cased) > 1000 and "\u0130" in cased and "\u03a3" in cased
    assert low[0x130] == -1 and low[0x3A3] == -1 and low[0x212A] == ord("k")
    # above the table nothing has a lowercase (a newer Unicode would make the table grow)
    assert all(chr(cp).lower() == chr(cp) for cp in range(_LOW_LIMIT, 0x110000) if not 0xD800 <= cp < 0xE000)
    neighbours = ["A", "\u00c9", "\u00e9", "\u0130", "\u212a", "\u1e9e", "\u03a3", "A\u03a3", "\u03c3", "\u2026", " ",
                  "\u00a0", "\u0301", "\U0001f600", "\u0100", "Z", "\u3000"]
    texts = []
    for i, c in enumerate([*_REPLACE, *_SAFE[::3], *cased[::2]]):
        left = neighbours[i % len(neighbours)]
        right = neighbours[(i // len(neighbours)) % len(neighbours)]
        texts.append(f"Word {left}{c}Tail \u2122 {c}{right}x")
    sims, digests = fingerprints_many(texts)
    for t, sim, digest in zip(texts, sims.tolist(), digests, strict=True):
        assert (sim, digest) == (_ref_simhash(t), _ref_digest(t)), repr(t)


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(), st.text(st.characters(max_codepoint=0x3000)), _WS_HEAVY),
                max_size=6))
def test_fingerprints_many_equals_the_reference_on_any_unicode(texts: list[str | None]) -> None:
    """Arbitrary Unicode (every plane, marks, cased and uncased letters, whitespace, NUL; fewer than
    three words; empty and None) through the kernel and its fallbacks: the plain-Python SimHash and
    the whole-text NFKC digest exactly, alone and for the scalar functions."""
    from crawl.fingerprint import fingerprints_many

    sims, digests = fingerprints_many(texts)
    for t, s, d in zip(texts, sims.tolist(), digests, strict=True):
        if not t:
            assert (s, d) == (0, None)
            continue
        assert (s, d) == (_ref_simhash(t), _ref_digest(t)), repr(t)
        assert simhash(t) == s


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(["a", "B", " ", "\n", "\u00e9", "\u00c9", "\u2026", "\u2122", "\ufb01", "\uff21",
                                 "\u00bd", "\u0130", "\u212a", "\u03a3", "\u03f9", "\u1e9e", "\u0301", "\u00a0",
                                 "\u3000", "\U0001f600", "\u2028", "\u0149", "\u01c4", "\u2126", "x.y"]),
                max_size=40).map("".join))
def test_digest_equals_whole_text_nfkc(text: str) -> None:
    from crawl.fingerprint import fingerprints_many

    assert fingerprints_many([text])[1] == [_ref_digest(text) if text else None]



_CACHE_PROBE = """
import json, sys
from crawl.fingerprint import fingerprints_many
from crawl.fingerprint_kernel import fingerprint_batch
sims, digests = fingerprints_many(json.load(sys.stdin))
stats = fingerprint_batch.stats
print(json.dumps([sims.tolist(), digests, sum(stats.cache_hits.values()), sum(stats.cache_misses.values())]))
"""


def _probe(texts: list[str], env: dict[str, str], cwd: Path) -> tuple[list[int], list[str | None], int, int]:
    """(SimHashes, digests, kernel cache hits, compilations) of ``texts`` in a fresh process; ``cwd``
    away from the repository, whose ``crawl`` would come first on ``sys.path``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    out = subprocess.run([sys.executable, "-c", _CACHE_PROBE], input=json.dumps(texts), capture_output=True, text=True,
                         env={**base, **env}, cwd=cwd, timeout=300, check=True)
    sims, digests, hits, misses = json.loads(out.stdout)
    return sims, digests, hits, misses


def test_compiled_kernel_is_cached_on_disk_and_works_without_a_writable_cache(tmp_path: Path) -> None:
    """A fresh process loads the compiled kernel from numba's on-disk cache (here NUMBA_CACHE_DIR);
    with no writable place at all (package directory, user cache directory) it compiles in memory
    instead of failing. Same fingerprints in every case."""
    texts = [_GOLDEN[1][0], _GOLDEN[3][0], "plain ascii text of a few words"]
    from crawl.fingerprint import fingerprints_many

    sims, want_digests = fingerprints_many(texts)
    want_sims = sims.tolist()
    env = {"PYTHONPATH": str(REPO), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    first = _probe(texts, env, tmp_path)
    second = _probe(texts, env, tmp_path)
    assert first[:2] == second[:2] == (want_sims, want_digests)
    assert any((tmp_path / "cache").rglob("*.nbi")) and first[3] >= 1  # compiled and stored ...
    assert second[2] >= 1 and second[3] == 0  # ... then loaded, not compiled
    # read-only everywhere: the package directory cannot hold __pycache__ (a file is in the way), the
    # user cache directory cannot be created (XDG_CACHE_HOME is a file), no NUMBA_CACHE_DIR
    pkg = tmp_path / "pkg"
    shutil.copytree(REPO / "crawl", pkg / "crawl", ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "crawl" / "__pycache__").write_text("not a directory")
    (tmp_path / "xdg").write_text("not a directory")
    third = _probe(texts, {"PYTHONPATH": str(pkg), "XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "xdg")},
                   tmp_path)
    assert third == (want_sims, want_digests, 0, 1)


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.text(max_size=40), _WS_HEAVY), st.booleans()), max_size=8))
def test_collapse_many_is_each_text_collapsed_or_kept(items: list[tuple[str, bool]]) -> None:
    """parse's text column: several texts in one buffer, each collapsed as ``str.split`` + join, or
    kept byte for byte when flagged verbatim (non-HTML documents)."""
    from crawl.fingerprint import collapse_many

    out, off, lengths = collapse_many([t for t, _ in items], [v for _, v in items])
    got = [out[a:b].tobytes().decode() for a, b in zip(off[:-1].tolist(), off[1:].tolist(), strict=True)]
    assert got == [t if v else " ".join(t.split()) for t, v in items]
    assert lengths.tolist() == [len(g) for g in got]  # characters, as Arrow's utf8_length counts them


def test_text_column_collapse_per_string_width() -> None:
    """One ``collapse_many`` batch mixing 1-, 2- and 4-byte strings (``str``'s internal widths),
    collapsed and verbatim, equals ``str.split``/``join`` and ``len`` text by text; a lone surrogate in a
    2- or 4-byte string raises. The pass reads each width through its own compiled loop (no
    per-character width switch: ~1.6x less CPU, bench/RESULTS.md "Text kernels per string width"),
    run here on arrays of each width as well."""
    from crawl.fingerprint import _tables, collapse_many
    from crawl.fingerprint_kernel import _collapse_one

    texts = ["  plain ASCII  text ", "caf\xe9\xa0 au  lait\x85", "\u2026 \u3000 \u2019quoted\u2019  end",
             "\U0001f600  astral\u2028 \u00e9 x ", "", " ", "\xff", "\U00010400", "a\u200ab"]
    for verbatim in ([False] * len(texts), [i % 2 == 0 for i in range(len(texts))]):
        out, off, lengths = collapse_many(texts, verbatim)
        for i, (t, v) in enumerate(zip(texts, verbatim, strict=True)):
            want = t if v else " ".join(t.split())
            assert out[off[i]:off[i + 1]].tobytes() == want.encode(), repr(t)
            assert lengths[i] == len(want)
    ws = _tables()[4]
    for t in texts:
        for dtype in (np.uint8, np.uint16, np.uint32):
            if t and max(map(ord, t)) > np.iinfo(dtype).max:
                continue
            codes = np.array([ord(c) for c in t], dtype)
            out = np.zeros(4 * len(t) + 3, np.uint8)
            end, length = _collapse_one(codes, False, ws, out, 3)
            assert out[3:end].tobytes() == " ".join(t.split()).encode() and length == len(" ".join(t.split()))
    for bad in ("ok text \ud800 more", "\U0001f600 x \udfff y"):
        with pytest.raises(UnicodeEncodeError):
            collapse_many(["fine", bad, "after"])
