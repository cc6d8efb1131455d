"""What travels in a frame, either way: one message or a packed frame of several
(protocol.pack), decoded by an endpoint's one decoder. Shared by the ZeroMQ transport
(cw/serve/transport.py), its lane (cw/serve/lane.py) and its in-process twin
(cw/serve/inproc.py)."""

from __future__ import annotations

import collections
from dataclasses import dataclass

import msgspec

from cw.serve.protocol import (PACK_MAX_BYTES, PACK_MAX_MESSAGE_BYTES, PACK_MAX_MESSAGES,
                               PACKED_LEADS, Codec, Packed, pack)


@dataclass(frozen=True)
class Malformed:
    raw: bytes
    error: str


def decode_frame(codec: Codec, data):
    """`data`: bytes, or the buffer of a frame received without a copy. Tensor payloads
    (`memoryview` fields) then stay views into the frame: a 600 KB input is not copied twice
    on its way in (at thousands of requests a second those copies were half a controller)."""
    try:
        return codec.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        if data and data[0] in PACKED_LEADS:
            return _decode_each(codec, data, e)
        return Malformed(bytes(data), str(e))


def _decode_each(codec: Codec, data, error: Exception):
    """A packed frame with a bad message in it: the others are what they are, and each bad one
    is Malformed alone (its sender hears of that request, and of no other)."""
    try:
        raws = msgspec.msgpack.decode(data, type=list[msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Malformed(bytes(data), str(error))
    messages = Packed()
    for raw in raws:
        try:
            messages.append(codec.decoder.decode(raw))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            messages.append(Malformed(bytes(raw), str(e)))
    return messages


class Alone(bytes):
    """A frame never packed with others."""


def packed(frames: list) -> bytes:
    return frames[0] if len(frames) == 1 else pack(frames)


def take_pack(queue: collections.deque) -> tuple[bytes, int]:
    """The frame to send for the head of `queue` (encoded messages, oldest first): as many
    small ones as fit in a packed frame, else the head alone; and how many it takes."""
    frames, size = [], 0
    # by index: other threads append to the queue meanwhile (iterating it would raise); only
    # its owner takes from the left
    for i in range(min(len(queue), PACK_MAX_MESSAGES)):
        data = queue[i]
        if type(data) is not bytes or len(data) > PACK_MAX_MESSAGE_BYTES or \
                size + len(data) > PACK_MAX_BYTES:
            break
        frames.append(data)
        size += len(data)
    if len(frames) < 2:
        return queue[0], 1
    return pack(frames), len(frames)
