"""Hexadecimal float literals in dense attributes mean bit patterns, as in MLIR.

xDSL (0.74) prints the non-finite elements of a float `dense<...>` as their bit pattern
(`-inf` in f32 is `0xff800000`) but parses a hexadecimal element back as an integer value
(4286578688.0), so a causal mask of -inf silently becomes +4.3e9 after one print and parse.
This module makes the parser read such elements as bit patterns of the element type (f16,
bf16, f32, f64), which is MLIR's meaning; importing `unityc.dialects` installs it.
"""

from __future__ import annotations

import struct
from typing import Any

from xdsl.dialects.builtin import AnyFloat, BFloat16Type, Float16Type, Float32Type, Float64Type
from xdsl.parser.attribute_parser import AttrParser

_BITS: dict[type, tuple[str, str]] = {
    Float16Type: ("<H", "<e"),
    Float32Type: ("<I", "<f"),
    Float64Type: ("<Q", "<d"),
}


def bits_to_float(bits: int, element: Any) -> float | None:
    """The float whose bit pattern in `element`'s format is `bits` (None: no such format)."""
    if isinstance(element, BFloat16Type):
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    formats = _BITS.get(type(element))
    if formats is None:
        return None
    return struct.unpack(formats[1], struct.pack(formats[0], bits))[0]


def _install() -> None:
    # Any: the element class is patched in place, which its declared type does not allow.
    element_class: Any = AttrParser._TensorLiteralElement
    if getattr(element_class, "_unityc_hex_floats", False):
        return
    to_type = element_class.to_type

    def hex_aware_to_type(self: Any, parser: AttrParser, type: Any) -> Any:
        text = self.span.text
        if isinstance(type, AnyFloat) and isinstance(self.value, int) and text[:2] in ("0x", "0X"):
            value = bits_to_float(int(text, 16), type)
            if value is not None:
                return value
        return to_type(self, parser, type)

    element_class.to_type = hex_aware_to_type
    element_class._unityc_hex_floats = True


_install()
