"""The SimHash's arithmetic written out in plain Python, sharing no code with crawl.fingerprint: the
oracle of tests/test_fingerprint.py (today's definition) and tests/test_neardup_boilerplate.py (the
definition rounds before session 19 stored). Both differ only in which word hashes they shingle."""

from __future__ import annotations

M64 = (1 << 64) - 1
WORD_BYTES = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyz_") | frozenset(range(128, 256))
P = 0x100000001B3


def mix(x: int) -> int:
    """SplitMix64's finaliser."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def shingle_simhash(words: list[int]) -> int:
    """Signed 64-bit SimHash of the word 3-shingles of ``words`` (word hashes); 0 without a shingle."""
    feats = [mix((a * 0x9E3779B97F4A7C15 + b * 0xC2B2AE3D27D4EB4F + c) & M64)
             for a, b, c in zip(words, words[1:], words[2:], strict=False)]
    if not feats:
        return 0
    fp = sum(1 << bit for bit in range(64) if 2 * sum(f >> bit & 1 for f in feats) > len(feats))
    return fp - (1 << 64) if fp >> 63 else fp
