"""The byte patterns every sample is filled with and verified against, in numpy.

Byte k of a buffer filled with seed s is byte (k % 4), little-endian, of the 32-bit word
pattern_word(k // 4, s), a hash (gpu/common.cuh has the CUDA twin). Every sample has a new
seed (seed_for(sequence)) and every slot of a ring its own (seed + slot), so stale,
skipped or misplaced bytes fail verification. Host-only paths and the tests use these
functions directly; GPU paths verify with a kernel and use them to word a mismatch.
"""

from __future__ import annotations

import numpy as np

from gpuipc_bench.errors import VerificationError

_M1, _M2, _M3 = np.uint32(0x9E3779B1), np.uint32(0x85EBCA77), np.uint32(0xC2B2AE3D)
_K0, _F1, _F2 = np.uint32(0x6A09E667), np.uint32(0x7FEB352D), np.uint32(0x846CA68B)


def seed_for(sequence: int) -> int:
    """A 32-bit pattern seed for sample `sequence` (distinct for the first 2**32 samples)."""
    return (sequence * 0x9E3779B1 + 0x243F6A88) & 0xFFFFFFFF


def pattern_words(first_word: int, count: int, seed: int) -> np.ndarray:
    """pattern_word for words first_word .. first_word+count-1."""
    w = np.arange(first_word, first_word + count, dtype=np.uint64)
    lo = (w & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (w >> np.uint64(32)).astype(np.uint32)
    s = np.array([seed & 0xFFFFFFFF], dtype=np.uint32)
    x = (lo * _M1) ^ (hi * _M2) ^ (s * _M3) ^ _K0
    x ^= x >> np.uint32(16)
    x *= _F1
    x ^= x >> np.uint32(15)
    x *= _F2
    x ^= x >> np.uint32(16)
    return x


def pattern_bytes(nbytes: int, seed: int, offset: int = 0, xor_mask: int = 0) -> np.ndarray:
    """Pattern bytes offset .. offset+nbytes-1 of `seed`, every 4-byte word XORed with xor_mask."""
    if nbytes <= 0:
        return np.zeros(0, dtype=np.uint8)
    first = offset // 4
    last = (offset + nbytes + 3) // 4
    words = pattern_words(first, last - first, seed)
    if xor_mask:
        words = words ^ np.uint32(xor_mask & 0xFFFFFFFF)
    start = offset - first * 4
    return words.astype("<u4").view(np.uint8)[start:start + nbytes].copy()


def expected_byte(offset: int, seed: int, xor_mask: int = 0) -> int:
    return int(pattern_bytes(1, seed, offset, xor_mask)[0])


def check(got: np.ndarray, seed: int, path: str, variant: str, nbytes: int, slot: int | None = None,
          xor_mask: int = 0) -> None:
    """Raise VerificationError at the first byte of `got` that is not the pattern of `seed`."""
    want = pattern_bytes(len(got), seed, xor_mask=xor_mask)
    bad = np.flatnonzero(got != want)
    if bad.size:
        k = int(bad[0])
        raise VerificationError(path, variant, nbytes, k, int(want[k]), int(got[k]), slot=slot)
