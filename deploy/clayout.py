"""The C-struct memory image of a fixed-size IDL message, as a robot's firmware sees it.

Some firmware checksums a message as the C compiler lays it out in memory (natural alignment,
padding inside and at the end of each struct), not as CDR puts it on the wire: CDR pads a
struct's members but not its tail, so the two differ wherever a struct ends on a short member.
`c_struct(cls)` derives the little-endian `struct.Struct` of that memory image from the IDL
class's field types; `c_bytes(msg)` packs a message into it.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from typing import Any, get_args, get_type_hints

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array

# IDL primitive -> (struct code, size); alignment equals size for all of these
_PRIMITIVES = {
    "uint8": "B", "int8": "b", "uint16": "H", "int16": "h", "uint32": "I", "int32": "i",
    "uint64": "Q", "int64": "q", "float32": "f", "float64": "d",
}


def _code(hint: Any) -> tuple[str, int, int]:
    """(struct format, size, alignment) of one field type."""
    if hint is bool:
        return "?", 1, 1
    if isinstance(hint, type) and issubclass(hint, IdlStruct):
        s, align = _layout(hint)
        return s, struct.calcsize("<" + s), align
    args = get_args(hint)
    if len(args) == 2 and isinstance(args[1], str) and args[1] in _PRIMITIVES:
        c = _PRIMITIVES[args[1]]
        size = struct.calcsize("<" + c)
        return c, size, size
    if len(args) == 2 and isinstance(args[1], array):
        fmt, size, align = _code(args[1].subtype)
        n = args[1].length
        if len(fmt) == 1:
            return f"{n}{fmt}", n * size, align
        return fmt * n, n * size, align
    raise TypeError(f"no fixed-size C layout for field type {hint!r}")


@cache
def _layout(cls: type) -> tuple[str, int]:
    """The struct format of one IDL struct (padding explicit) and its alignment."""
    fmt, offset, max_align = "", 0, 1
    for name, hint in get_type_hints(cls, include_extras=True).items():
        f, size, align = _code(hint)
        pad = -offset % align
        fmt += f"{pad}x" if pad else ""
        fmt += f
        offset += pad + size
        max_align = max(max_align, align)
        del name
    tail = -offset % max_align
    return fmt + (f"{tail}x" if tail else ""), max_align


@cache
def c_struct(cls: type) -> struct.Struct:
    """The little-endian C memory layout of an IDL struct class."""
    return struct.Struct("<" + _layout(cls)[0])


def _flatten(msg: Any, out: list) -> None:
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if isinstance(value, IdlStruct):
            _flatten(value, out)
        elif isinstance(value, list | tuple | bytes | bytearray):  # uint8 arrays decode as bytes
            if value and isinstance(value[0], IdlStruct):
                for item in value:
                    _flatten(item, out)
            else:
                out.extend(value)
        else:
            out.append(value)


def c_bytes(msg: IdlStruct) -> bytes:
    """The message's memory image as its C struct (little-endian, natural alignment)."""
    values: list = []
    _flatten(msg, values)
    return c_struct(type(msg)).pack(*values)
