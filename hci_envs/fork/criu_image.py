"""Reading and rewriting CRIU's images of one entry, without CRIU's own tools.

A copy of a dumped desktop differs from its source in two small images only: the user namespace's map
(``userns-N.img``: the host uids its root and agent run as) and the network namespace's sysctls
(``netns-N.img``). Each is 8 bytes of magic, a 4-byte size and one protobuf message; the fields touched here
are a handful of varints, so a small reader and writer of protobuf's wire format does (no ``crit`` start per
copy, no protobuf schema compiled).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from ..errors import ForkError

#: One field of a message: its number, its wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32) and its value.
Field = tuple[int, int, "int | bytes"]


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def fields(message: bytes) -> list[Field]:
    """The top-level fields of a protobuf message, in order."""
    found: list[Field] = []
    i = 0
    while i < len(message):
        key, i = read_varint(message, i)
        number, kind = key >> 3, key & 7
        value: int | bytes
        if kind == 0:
            value, i = read_varint(message, i)
        elif kind == 2:
            size, i = read_varint(message, i)
            value, i = message[i:i + size], i + size
        elif kind in (1, 5):
            size = 4 if kind == 5 else 8
            value, i = message[i:i + size], i + size
        else:
            raise ForkError(f"a CRIU image holds a field of wire type {kind}, which is not read here",
                            reason="restore failed")
        found.append((number, kind, value))
    return found


def encode(message: list[Field]) -> bytes:
    out = bytearray()
    for number, kind, value in message:
        out += varint(number << 3 | kind)
        if kind == 0:
            out += varint(value)  # type: ignore[arg-type]
        elif kind == 2:
            out += varint(len(value)) + value  # type: ignore[arg-type,operator]
        else:
            out += value  # type: ignore[operator]
    return bytes(out)


def by_number(message: bytes) -> dict[int, int | bytes]:
    """A message's fields by number (the last one of a repeated field)."""
    return {number: value for number, _kind, value in fields(message)}


def message_of(image: bytes) -> bytes:
    """The message of an image of one entry: 8 bytes of magic, a 4-byte size, the message."""
    (size,) = struct.unpack_from("<I", image, 8)
    return image[12:12 + size]


def rewrite(path: Path, edit: Callable[[list[Field]], list[Field]]) -> None:
    """Rewrite an image of one entry with its message's fields passed through ``edit``. The file is replaced,
    not written in place: a copy's images are hard links to the dump's until they differ."""
    data = path.read_bytes()
    body = encode(edit(fields(message_of(data))))
    fresh = path.with_name(path.name + ".new")
    fresh.write_bytes(data[:8] + struct.pack("<I", len(body)) + body)
    fresh.replace(path)


def give_copy_its_uids(images: Path, uids: dict[int, int], gids: dict[int, int]) -> None:
    """Make a dump's images restore as other host ids: ``uids`` maps each uid inside the desktop (0, 1000) to
    the copy's host uid, ``gids`` each gid to its host gid (UsernsEntry: uid_map=1, gid_map=2, each extent
    first=1, lower_first=2, count=3). The network namespace's ping_group_range goes (NetnsEntry.ipv4_sysctl=10):
    it names gid 1, which a copy does not map, so the restore could not write it back; the kernel's default is
    the same (off)."""
    def remap(message: list[Field]) -> list[Field]:
        out: list[Field] = []
        for number, kind, value in message:
            if number in (1, 2) and kind == 2:
                extent = by_number(value)  # type: ignore[arg-type]
                inside, ids = int(extent[1]), (uids if number == 1 else gids)
                if inside not in ids:
                    raise ForkError(f"the dump maps id {inside}, which the copy has no host id for",
                                    reason="restore failed")
                value = encode([(1, 0, inside), (2, 0, ids[inside]), (3, 0, int(extent[3]))])
            out.append((number, kind, value))
        return out

    for image in images.glob("userns-*.img"):
        rewrite(image, remap)
    for image in images.glob("netns-*.img"):
        rewrite(image, lambda message: [f for f in message if f[0] != 10])


def frozen_seconds(images: Path) -> float:
    """How long the dump kept its processes frozen (stats-dump: StatsEntry.dump=1, DumpStatsEntry.frozen_time=2,
    in microseconds)."""
    dump = by_number(message_of((images / "stats-dump").read_bytes()))[1]
    return int(by_number(dump)[2]) / 1e6  # type: ignore[arg-type]
