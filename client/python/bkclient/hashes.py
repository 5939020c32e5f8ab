"""Checksums the formats use: XXH64 (entries, docs/protocol.md "Entries") and CRC-32C
(ledger metadata, docs/metadata.md "Ledger metadata encoding").

xxh64 uses the C implementation of Debian's python3-xxhash when it is installed, and a
pure-Python one otherwise (about 20 times slower; tests/test_codecs.py checks both against
known vectors).
"""

_M64 = (1 << 64) - 1
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(acc, val):
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _M64


def xxh64_pure(data, seed=0):
    """Returns XXH64 of data (bytes-like) with seed, as an int, in pure Python."""
    mv = memoryview(data)
    n = len(mv)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M64
        v2 = (seed + _P2) & _M64
        v3 = seed & _M64
        v4 = (seed - _P1) & _M64
        frombytes = int.from_bytes
        limit = n - 32
        while i <= limit:
            v1 = _round(v1, frombytes(mv[i:i + 8], "little"))
            v2 = _round(v2, frombytes(mv[i + 8:i + 16], "little"))
            v3 = _round(v3, frombytes(mv[i + 16:i + 24], "little"))
            v4 = _round(v4, frombytes(mv[i + 24:i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        h = _merge(h, v1)
        h = _merge(h, v2)
        h = _merge(h, v3)
        h = _merge(h, v4)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(mv[i:i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(mv[i:i + 4], "little") * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (mv[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


try:  # Debian: python3-xxhash
    import xxhash as _xxhash

    def xxh64(data, seed=0):
        """Returns XXH64 of data with seed, as an int (C implementation)."""
        return _xxhash.xxh64(bytes(data), seed=seed).intdigest()

    XXH64_IMPLEMENTATION = "xxhash module"
except ImportError:  # pragma: no cover - depends on the machine
    xxh64 = xxh64_pure
    XXH64_IMPLEMENTATION = "pure Python"


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data):
    """Returns CRC-32C (Castagnoli) of data, as an int."""
    c = 0xFFFFFFFF
    t = _CRC32C
    for b in bytes(data):
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
