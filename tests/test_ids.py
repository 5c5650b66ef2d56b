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


def test_a_batch_is_ordered_and_continues_the_single_ids():
    from mu.ids import uuid7_batch

    ms = 1_950_000_000_000
    before = uuid7(ms)
    batch = uuid7_batch([ms] * 5000 + [ms + 1, ms + 7, ms + 3])  # past the counter, then a time that went back
    after = uuid7(ms)
    ids = [before] + batch + [after]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for text in batch:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert uuid7_floor(ms) < batch[0] < uuid7_floor(ms + 1)  # in its own millisecond
    assert uuid7_floor(ms + 7) <= batch[-1] < uuid7_floor(ms + 8)  # a time that went back takes the last one
    assert uuid7_batch([]) == []
