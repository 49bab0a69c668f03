"""FEEDBACK (10) and FEEDBACK_ACK (11) of the tlserve wire format (docs/wire.md).

A PREDICT sent with an impression id (the LOG flag) is kept by the server in its impression
log; a FEEDBACK names items of such impressions and gives each a label and a weight, and the
server joins them to the logged features and trains on the result.  The FEEDBACK_ACK says how
many events were accepted (joined, and appended to the server's sample log before the ack was
sent) and why each other one was refused.

Same rules as wire.py: fields checked in wire order, a count against its limits and then
against the least bytes its elements take (17 per event, 2 per refusal) before any element is
read, TRAILING_BYTES last.  This module registers its decoders with wire.decode_message.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple, Optional, Sequence

from . import wire
from .errors import ErrorCode, WireError
from .wire import MAX_ITEMS, MsgType, _encode_name, _Reader, check_weight, encode_varint

__all__ = [
    "Refusal", "FeedbackEvent", "FeedbackRequest", "Refused", "FeedbackAck",
    "MIN_BYTES_PER_EVENT", "MIN_BYTES_PER_REFUSAL", "encode_feedback", "decode_feedback",
    "encode_feedback_ack", "decode_feedback_ack",
]

MIN_BYTES_PER_EVENT = 17      # u64 impression_id + 1-byte varint item + f32 label + f32 weight
MIN_BYTES_PER_REFUSAL = 2     # 1-byte varint event + u8 reason

_EVENT = struct.Struct("<ff")  # label, weight
_U64 = struct.Struct("<Q")


class Refusal(enum.IntEnum):
    """Why the server refused one FEEDBACK event (FEEDBACK_ACK reason)."""

    UNKNOWN_IMPRESSION = 1   # never logged, or expired from the impression log
    ITEM_OUT_OF_RANGE = 2    # item is not below the logged PREDICT's items
    WRONG_MODEL = 3          # the impression was logged for another model
    DUPLICATE = 4            # this impression item already has this feedback


class FeedbackEvent(NamedTuple):
    """One label for one item of a logged PREDICT."""

    impression_id: int       # the LOG PREDICT's impression id, non-zero
    item: int                # the item's index in that PREDICT
    label: float             # 0.0 or 1.0
    weight: float = 1.0      # finite, in [0, 1e6]


class FeedbackRequest(NamedTuple):
    """A decoded FEEDBACK: model name and its events."""

    model: str
    events: list             # of FeedbackEvent


class Refused(NamedTuple):
    """One refused event: its index in the FEEDBACK and the reason (Refusal, or an int)."""

    event: int
    reason: int


class FeedbackAck(NamedTuple):
    """A decoded FEEDBACK_ACK: events accepted, and the refused ones in event order."""

    accepted: int
    refused: list            # of Refused


def _check_event(i, e) -> None:
    wire.check_u64(e.impression_id, "event %d impression_id" % i)
    wire.check_u64(e.item, "event %d item" % i)
    if not 0 < e.impression_id <= wire.U64_MASK:
        raise WireError(ErrorCode.BAD_VALUE, "event %d impression_id %r is not 1..2^64-1"
                        % (i, e.impression_id))
    if not 0 <= e.item < MAX_ITEMS:
        raise WireError(ErrorCode.BAD_VALUE, "event %d item %r is not below %d"
                        % (i, e.item, MAX_ITEMS))
    if e.label not in (0.0, 1.0):
        raise WireError(ErrorCode.BAD_VALUE, "event %d label %r is not 0 or 1" % (i, e.label))
    check_weight(e.weight, "event %d weight" % i)


def encode_feedback(model, events: Sequence, *, check: bool = True) -> bytes:
    """FEEDBACK payload.  events: FeedbackEvent or (impression_id, item, label[, weight])
    tuples.  check=False skips the checks so tests can forge bad frames."""
    evs = [FeedbackEvent(*e) for e in events]
    out = bytearray()
    _encode_name(model, out, check)
    if check:
        if not evs:
            raise WireError(ErrorCode.NO_ITEMS, "a FEEDBACK with 0 events")
        if len(evs) > MAX_ITEMS:
            raise WireError(ErrorCode.TOO_MANY_ITEMS, "%d events, over %d" % (len(evs), MAX_ITEMS))
    out += encode_varint(len(evs))
    for i, e in enumerate(evs):
        if check:
            _check_event(i, e)
        out += _U64.pack(e.impression_id) + encode_varint(e.item) + _EVENT.pack(e.label, e.weight)
    return bytes(out)


def decode_feedback(payload) -> FeedbackRequest:
    """FEEDBACK payload in wire order: name, events (1..MAX_ITEMS, then 17 bytes each left or
    TRUNCATED), then per event impression_id (0: BAD_VALUE), item (not below MAX_ITEMS:
    BAD_VALUE), label (not 0 or 1: BAD_VALUE), weight (outside [0, 1e6]: BAD_VALUE)."""
    r = _Reader(payload)
    model = r.name()
    n = r.count("events", MIN_BYTES_PER_EVENT)
    evs = []
    for i in range(n):
        at = r.pos
        (iid,) = r.unpack(_U64, "event %d impression_id" % i)
        if iid == 0:
            raise WireError(ErrorCode.BAD_VALUE, "event %d impression_id 0 at offset %d" % (i, at))
        at = r.pos
        item = r.varint()
        if item >= MAX_ITEMS:
            raise WireError(ErrorCode.BAD_VALUE, "event %d item %d at offset %d is not below %d"
                            % (i, item, at, MAX_ITEMS))
        (label,) = r.unpack(struct.Struct("<f"), "event %d label" % i)
        if label != 0.0 and label != 1.0:
            raise WireError(ErrorCode.BAD_VALUE, "event %d label %r is not 0 or 1" % (i, label))
        (weight,) = r.unpack(struct.Struct("<f"), "event %d weight" % i)
        check_weight(weight, "event %d weight" % i)
        evs.append(FeedbackEvent(iid, item, label, weight))
    r.done()
    return FeedbackRequest(model, evs)


def encode_feedback_ack(accepted: int, refused: Sequence = (), *, check: bool = True) -> bytes:
    """FEEDBACK_ACK payload.  refused: Refused or (event index, reason) pairs, ascending."""
    refs = [Refused(*x) for x in refused]
    events = accepted + len(refs)
    if check:
        if events == 0:
            raise WireError(ErrorCode.NO_ITEMS, "a FEEDBACK_ACK for 0 events")
        if events > MAX_ITEMS:
            raise WireError(ErrorCode.TOO_MANY_ITEMS, "%d events, over %d" % (events, MAX_ITEMS))
        prev = -1
        for x in refs:
            if not prev < x.event < events:
                raise WireError(ErrorCode.BAD_VALUE, "refused event %d is not ascending below %d"
                                % (x.event, events))
            if x.reason not in set(Refusal):
                raise WireError(ErrorCode.BAD_VALUE, "refusal reason %r is not 1..4" % (x.reason,))
            prev = x.event
    out = bytearray(encode_varint(accepted) + encode_varint(len(refs)))
    for x in refs:
        out += encode_varint(x.event) + bytes([x.reason & 0xFF])
    return bytes(out)


def decode_feedback_ack(payload) -> FeedbackAck:
    """FEEDBACK_ACK payload in wire order: accepted, refused (each over MAX_ITEMS:
    TOO_MANY_ITEMS), their sum (0: NO_ITEMS, over MAX_ITEMS: TOO_MANY_ITEMS), 2 bytes per
    refusal left (TRUNCATED), then each refusal: event index (not ascending or not below the
    sum: BAD_VALUE), reason (not 1..4: BAD_VALUE); TRAILING_BYTES last."""
    r = _Reader(payload)
    counts = []
    for what in ("accepted", "refused"):
        at = r.pos
        v = r.varint()
        if v > MAX_ITEMS:
            raise WireError(ErrorCode.TOO_MANY_ITEMS, "%s %d at offset %d is over %d"
                            % (what, v, at, MAX_ITEMS))
        counts.append((v, at))
    (accepted, _), (n, at) = counts
    events = accepted + n
    if events == 0:
        raise WireError(ErrorCode.NO_ITEMS, "accepted + refused is 0")
    if events > MAX_ITEMS:
        raise WireError(ErrorCode.TOO_MANY_ITEMS, "accepted + refused %d is over %d"
                        % (events, MAX_ITEMS))
    r.need_for_count(n, MIN_BYTES_PER_REFUSAL, "refused", at)
    refs = []
    prev = -1
    for i in range(n):
        at = r.pos
        ev = r.varint()
        if not prev < ev < events:
            raise WireError(ErrorCode.BAD_VALUE, "refusal %d event %d at offset %d is not "
                            "ascending below %d" % (i, ev, at, events))
        reason = r.u8("refusal %d reason" % i)
        if reason not in set(Refusal):
            raise WireError(ErrorCode.BAD_VALUE, "refusal %d reason %d is not 1..4" % (i, reason))
        refs.append(Refused(ev, Refusal(reason)))
        prev = ev
    r.done()
    return FeedbackAck(accepted, refs)


wire._DECODERS[MsgType.FEEDBACK] = decode_feedback
wire._DECODERS[MsgType.FEEDBACK_ACK] = decode_feedback_ack
