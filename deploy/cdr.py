"""Hand-written XCDR1 codecs for the messages a control cycle moves at robot rate.

cyclonedds' generic Python serializer walks every field through several layers of calls:
about 40 us to decode a 12-joint JointState and 10 us to encode a Float64MultiArray, per
message, per period. These codecs write the same bytes directly with `struct` (tests compare
both with rosbags' CDR, in both directions), and the message classes in deploy/messages.py use
them for `serialize()` and `deserialize()`, which is what the DDS reader and writer call.

XCDR1 little-endian: a 4-byte encapsulation header (00 01 00 00), then each primitive aligned
to its size (8 at most) from the start of the payload; strings are a uint32 length counting a
NUL, the bytes, the NUL; sequences a uint32 count and the elements (no alignment when empty).

Fixed-size messages (only primitives, arrays and nested structs of those: Unitree's LowState
and LowCmd, PX4's) are one `struct.Struct` each, derived from the IDL class by `fixed_struct`:
a message is flattened to its primitives in wire order, packed in one call, and unpacked in one
call into the flat tuple its builder turns back into objects (`install_fixed`). cyclonedds'
generic serializer took ~350 us to decode a LowState and ~235 us to encode a LowCmd.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, get_args, get_type_hints

from cyclonedds.idl import IdlStruct
from cyclonedds.idl._support import Endianness
from cyclonedds.idl.types import array

HEADER = b"\x00\x01\x00\x00"
_U32 = struct.Struct("<I")
_TIME = struct.Struct("<iI")
_UU = struct.Struct("<II")
_D = {n: struct.Struct(f"<{n}d") for n in (3, 4, 6, 7, 9, 36)}

# Encoded string sequences by content: a robot's joint names are the same in every JointState,
# and encoding or parsing a dozen strings one by one was most of that message's cost. A block
# starts 4-aligned (right after its uint32 count), so its bytes do not depend on where it is.
_BLOCKS: dict[tuple[str, ...], bytes] = {}
_MAX_BLOCKS = 16


def _remember(items: tuple[str, ...], block: bytes) -> None:
    if len(_BLOCKS) >= _MAX_BLOCKS:
        _BLOCKS.clear()
    _BLOCKS[items] = block


class Writer:
    __slots__ = ("b",)

    def __init__(self) -> None:
        self.b = bytearray(HEADER)

    def align(self, n: int) -> None:
        pad = -(len(self.b) - 4) % n
        if pad:
            self.b += bytes(pad)

    def u32(self, v: int) -> None:
        self.align(4)
        self.b += _U32.pack(v)

    def time(self, sec: int, nanosec: int) -> None:
        self.align(4)
        self.b += _TIME.pack(sec, nanosec)

    def string(self, s: str) -> None:
        data = s.encode()
        self.u32(len(data) + 1)
        self.b += data
        self.b += b"\x00"

    def strings(self, items: Any) -> None:
        """A sequence of strings (a uint32 count, then each string)."""
        self.u32(len(items))
        key = tuple(items)
        block = _BLOCKS.get(key)
        if block is None:
            w = Writer()
            for s in key:
                w.string(s)
            block = bytes(w.b[4:])
            _remember(key, block)
        self.b += block

    def doubles(self, values: Any) -> None:
        """A fixed number of float64 (an array or a run of double fields)."""
        self.align(8)
        n = len(values)
        self.b += (_D.get(n) or struct.Struct(f"<{n}d")).pack(*values)

    def double_seq(self, values: Any) -> None:
        self.u32(len(values))
        if len(values):
            self.doubles(values)

    def bytes(self) -> bytes:
        return bytes(self.b)


class Reader:
    __slots__ = ("b", "o")

    def __init__(self, data: bytes | bytearray | memoryview, has_header: bool = True):
        self.b = bytes(data)
        if has_header and self.b[:2] != b"\x00\x01":
            raise ValueError(f"not little-endian plain CDR (encapsulation {self.b[:4].hex()})")
        self.o = 4 if has_header else 0
        if not has_header:  # alignment counts from the payload's start either way
            self.b, self.o = HEADER + self.b, 4

    def align(self, n: int) -> None:
        self.o += -(self.o - 4) % n

    def u32(self) -> int:
        self.align(4)
        (v,) = _U32.unpack_from(self.b, self.o)
        self.o += 4
        return v

    def time(self) -> tuple[int, int]:
        self.align(4)
        v = _TIME.unpack_from(self.b, self.o)
        self.o += 8
        return v

    def string(self) -> str:
        n = self.u32()
        s = self.b[self.o:self.o + n - 1].decode()
        self.o += n
        return s

    def strings(self) -> list[str]:
        """A sequence of strings; a block seen before (the same bytes) is not parsed again."""
        n = self.u32()
        for key, block in list(_BLOCKS.items()):  # (a snapshot: other threads may add)
            if len(key) == n and self.b.startswith(block, self.o):
                self.o += len(block)
                return list(key)
        start = self.o
        items = [self.string() for _ in range(n)]
        _remember(tuple(items), self.b[start:self.o])
        return items

    def doubles(self, n: int) -> list[float]:
        self.align(8)
        v = (_D.get(n) or struct.Struct(f"<{n}d")).unpack_from(self.b, self.o)
        self.o += 8 * n
        return list(v)

    def double_seq(self) -> list[float]:
        n = self.u32()
        return self.doubles(n) if n else []

    def uu(self) -> tuple[int, int]:
        self.align(4)
        v = _UU.unpack_from(self.b, self.o)
        self.o += 8
        return v


# --- installing a codec on an IDL class ------------------------------------------------------
def install(cls: type, encode: Callable[[Writer, Any], None],
            decode: Callable[[Reader], Any]) -> None:
    """Use a hand-written codec for plain little-endian XCDR1, the generic one otherwise (a
    caller's buffer, big-endian, XCDR2)."""
    generic_serialize, generic_deserialize = cls.serialize, cls.deserialize

    def serialize(self, buffer=None, endianness=None, use_version_2=None) -> bytes:
        if buffer is None and endianness in (None, Endianness.Little) and not use_version_2:
            w = Writer()
            encode(w, self)
            return w.bytes()
        return generic_serialize(self, buffer, endianness, use_version_2)

    def deserialize(klass, data, has_header=True, use_version_2=None):
        if not use_version_2 and (not has_header or bytes(data[:2]) == b"\x00\x01"):
            return decode(Reader(data, has_header))
        return generic_deserialize(data, has_header, use_version_2)

    cls.serialize = serialize
    cls.deserialize = classmethod(deserialize)


# --- fixed-size messages ----------------------------------------------------------------------
_CODES = {"uint8": "B", "int8": "b", "uint16": "H", "int16": "h", "uint32": "I", "int32": "i",
          "uint64": "Q", "int64": "q", "float32": "f", "float64": "d"}


def _codes(hint: Any, where: str) -> Iterator[str]:
    """The struct code of every primitive of one field, in wire order."""
    if hint is bool:
        yield "?"
        return
    if isinstance(hint, type) and issubclass(hint, IdlStruct):
        for name, sub in get_type_hints(hint, include_extras=True).items():
            yield from _codes(sub, f"{hint.__name__}.{name}")
        return
    args = get_args(hint)
    if len(args) == 2 and isinstance(args[1], str) and args[1] in _CODES:
        yield _CODES[args[1]]
        return
    if len(args) == 2 and isinstance(args[1], array):
        for _ in range(args[1].length):
            yield from _codes(args[1].subtype, where)
        return
    raise TypeError(f"{where}: {hint!r} has no fixed size (strings and sequences do not)")


@cache
def fixed_struct(cls: type) -> struct.Struct:
    """The little-endian XCDR1 payload of a fixed-size IDL struct as one `struct.Struct`
    (padding explicit, each primitive aligned to its size from the payload's start)."""
    fmt, offset = [], 0
    for code in _codes(cls, cls.__name__):
        size = struct.calcsize(code)
        pad = -offset % size  # sizes are 1, 2, 4, 8: XCDR1 aligns each to its size
        if pad:
            fmt.append(f"{pad}x")
        fmt.append(code)
        offset += pad + size
    return struct.Struct("<" + "".join(fmt))


def install_fixed(cls: type, flatten: Callable[[Any], list], build: Callable[[tuple], Any]
                  ) -> None:
    """Serialize `cls` by packing `flatten(msg)` (its primitives in wire order) with
    `fixed_struct(cls)`; deserialize by unpacking that struct and `build`ing from the tuple."""
    layout = fixed_struct(cls)

    def encode(w: Writer, msg: Any) -> None:
        try:
            w.b += layout.pack(*flatten(msg))
        except (struct.error, TypeError) as exc:
            raise ValueError(f"{cls.__name__}: cannot serialize ({exc}): an array of the wrong "
                             "length or a value outside its field's type") from None

    def decode(r: Reader) -> Any:
        if len(r.b) - r.o < layout.size:
            raise ValueError(f"{cls.__name__}: {len(r.b) - r.o} bytes of payload, the message "
                             f"has {layout.size}")
        return build(layout.unpack_from(r.b, r.o))

    install(cls, encode, decode)
