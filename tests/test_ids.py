"""Journal ids: UUIDv7, strictly increasing within one process."""

from __future__ import annotations

import uuid

from mu.ids import uuid7, uuid7_floor


def test_ids_are_version_7_and_strictly_increasing():
    ids = [uuid7() for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    parsed = uuid.UUID(ids[0])
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_ids_of_one_millisecond_stay_ordered_past_the_counter():
    ids = [uuid7(1_800_000_000_000) for _ in range(5000)]  # more than 12 bits of counter
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_floor_is_below_every_id_of_its_millisecond():
    ms = 1_900_000_000_000
    assert uuid7_floor(ms) < uuid7(ms) < uuid7_floor(ms + 10_000)
