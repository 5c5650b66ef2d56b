"""Time-sortable identifiers (UUIDv7, RFC 9562).

Ids made by one process are strictly increasing even within a millisecond
(a counter fills the 12 `rand_a` bits), so the journal sorts by id alone.
`uuid7` and `uuid7_batch` share that counter: their ids interleave in the
order they were made.
"""

from __future__ import annotations

import _thread
import os
import time

# Every reader imports this module on its way to the store, and every
# writer makes a handful of ids: what ids need is kept to what loads
# fast (`os.urandom` for the random bits, not the `random` module;
# `_thread`'s lock, which is the one `threading.Lock` is; no `typing`).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Sequence

_lock = _thread.allocate_lock()
_last_ms = 0
_seq = 0
_MS_MASK = (1 << 48) - 1


def _random_bits(bits: int) -> int:
    return int.from_bytes(os.urandom((bits + 7) // 8), "big") >> (-bits % 8)


def uuid7(now_ms: "int | None" = None) -> str:
    """A new UUIDv7 as its canonical 36-character string (of `now_ms`,
    else of the current time)."""
    return uuid7_batch([int(time.time() * 1000) if now_ms is None else now_ms])[0]


def uuid7_batch(times_ms: Sequence[int]) -> List[str]:
    """One new UUIDv7 for each epoch-ms time in `times_ms`, in order:
    strictly increasing, each in its millisecond or the next one the
    counter borrows, made under one lock for a whole batch (the journal's
    flush; `uuid7` is a batch of one).

    The 62 random bits are drawn once per batch.  They only keep ids of
    different processes apart (a process's own ids are kept apart and in
    order by their millisecond and counter), which a batch's one draw does
    as well as a draw per id, at a fraction of the cost of formatting each
    id whole.
    """
    global _last_ms, _seq
    rand = _random_bits(62)
    tail = f"-{0x8000 | rand >> 48:04x}-{rand & 0xFFFFFFFFFFFF:012x}"
    ids: List[str] = []
    append = ids.append
    head_ms, head = -1, ""
    with _lock:
        last, seq = _last_ms, _seq
        for ms in times_ms:
            if ms <= last:
                ms = last
                seq += 1
                if seq > 0xFFF:  # counter spent: borrow the next millisecond
                    ms += 1
                    seq = 0
            else:
                seq = 0
            last = ms
            if ms != head_ms:  # the time's text, once per millisecond
                masked = ms & _MS_MASK
                head_ms, head = ms, f"{masked >> 16:08x}-{masked & 0xFFFF:04x}-7"
            append(f"{head}{seq:03x}{tail}")
        _last_ms, _seq = last, seq
    return ids


def uuid7_floor(ms: int) -> str:
    """The smallest UUIDv7 of millisecond `ms`: a bound for range queries."""
    value = (ms & _MS_MASK) << 80 | 0x7 << 76 | 0b10 << 62
    return _text(value)


def _text(value: int) -> str:
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
