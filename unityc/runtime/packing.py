"""Large constants as text: their raw bytes (row-major, little-endian, as a dense literal holds
them) compressed with zlib and encoded in base64. The pcg dialect prints a large `pcg.constant`
this way (`value zlib<"..."> : tensor<...>`), and a generated program holds it the same way,
decoded once per process (`Constant.tensor`). A causal mask of 2048 x 2048 floats (16 MiB, 32 MiB
as a hex literal) packs into about 40 KB. Standard library only: the compiler imports this
without torch."""

from __future__ import annotations

import base64
import binascii
import zlib

LEVEL = 6


def pack(raw: bytes) -> str:
    return base64.b64encode(zlib.compress(raw, LEVEL)).decode("ascii")


def unpack(text: str, size: int) -> bytes:
    """The `size` bytes `text` packs; ValueError if it is not base64 of zlib data of exactly
    that size (decompression stops past `size`, so a small text cannot expand without bound)."""
    try:
        compressed = base64.b64decode(text.encode("ascii"), validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(compressed, size + 1)
    except (binascii.Error, zlib.error, UnicodeEncodeError) as e:
        raise ValueError(f"not base64 of zlib data ({e})") from None
    if len(raw) != size or not inflater.eof:
        raise ValueError(f"the data does not hold exactly {size} bytes")
    return raw
