"""Time-sortable identifiers (UUIDv7, RFC 9562).

Ids made by one process are strictly increasing even within a millisecond
(a counter fills the 12 `rand_a` bits), so the journal sorts by id alone.
"""

from __future__ import annotations

import random
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_seq = 0


def uuid7(now_ms: "int | None" = None) -> str:
    """A new UUIDv7 as its canonical 36-character string."""
    global _last_ms, _seq
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms = _last_ms
            _seq += 1
            if _seq > 0xFFF:  # counter spent: borrow the next millisecond
                ms += 1
                _seq = 0
        else:
            _seq = 0
        _last_ms = ms
        seq = _seq
    # The random bits only keep ids of different processes apart; they guard
    # no secret, so the cheap generator will do.
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | random.getrandbits(62)
    return _text(value)


def uuid7_floor(ms: int) -> str:
    """The smallest UUIDv7 of millisecond `ms`: a bound for range queries."""
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | 0b10 << 62
    return _text(value)


def _text(value: int) -> str:
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
