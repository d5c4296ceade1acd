"""Which processes the memory backstop stops (`nodeagent.status.over_charge`): the whole
over-charge at once, escapes from the core's accounting first, then the largest."""

from __future__ import annotations

from nodeagent.status import over_charge

MIB = 1024**2


def test_every_zombie_link_over_the_cap_goes_in_one_tick_and_the_honest_process_stays() -> None:
    held = {10: 900 * MIB, 21: 256 * MIB, 22: 256 * MIB, 23: 256 * MIB, 24: 256 * MIB}
    assert over_charge(held, bypassed={21, 22, 23, 24}, limit=1024 * MIB) == [21, 22, 23, 24]


def test_only_as_many_as_bring_the_claim_within_its_cap() -> None:
    held = {10: 600 * MIB, 11: 300 * MIB, 21: 200 * MIB}
    assert over_charge(held, bypassed={21}, limit=1024 * MIB) == [21]
    # within its accounting, two processes over the cap (a rewritten region): the largest goes
    assert over_charge({10: 900 * MIB, 11: 900 * MIB}, set(), 1024 * MIB) == [10]
    assert over_charge({10: 900 * MIB}, set(), 1024 * MIB) == []
