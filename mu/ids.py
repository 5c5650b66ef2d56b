"""Time-sortable identifiers (UUIDv7, RFC 9562).

Ids made by one process are strictly increasing even within a millisecond
(a counter fills the 12 `rand_a` bits), so the journal sorts by id alone.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

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
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


def uuid7_floor(ms: int) -> str:
    """The smallest UUIDv7 of millisecond `ms`: a bound for range queries."""
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | 0b10 << 62
    return str(uuid.UUID(int=value))
