"""The compute backstop's decision (nodeagent/compute_watch.py), on made-up NVML samples."""

from __future__ import annotations

from nodeagent.compute_watch import (
    FIRST_HOLD_S,
    MAX_HOLD_S,
    MIN_DUTY,
    ComputeWatch,
    next_duty,
)

KEY = ("claim-1", "GPU-0")


def _feed(watch: ComputeWatch, samples: list[dict[int, float]], share: float, tick: float = 1.0):
    """Ticks of `samples`; returns (tick index, window mean) of the first verdict, or None."""
    for i, by_pid in enumerate(samples):
        verdict = watch.observe(i * tick, KEY, by_pid, share)
        if verdict is not None:
            return i, verdict
    return None


def test_a_claim_over_its_share_for_a_whole_window_is_judged_as_a_whole() -> None:
    watch = ComputeWatch(window_s=5.0, tolerance_points=10.0)
    stop = _feed(watch, [{7: 80.0, 8: 20.0}] * 10, share=25)
    assert stop == (5, 100.0)  # the first tick a full window has been seen: both processes


def test_within_the_tolerance_nothing_is_stopped_however_long() -> None:
    watch = ComputeWatch(window_s=5.0, tolerance_points=10.0)
    assert _feed(watch, [{7: 34.0}] * 60, share=25) is None
    assert _feed(ComputeWatch(), [{7: 78.0}, {7: 72.0}] * 30, share=75) is None


def test_a_short_burst_is_averaged_away_but_a_sustained_one_is_not() -> None:
    # One tick at the whole device on a 50 % share moves a 5 s mean by 8.3 points: kept.
    burst = [{7: 50.0}] * 6 + [{7: 100.0}] + [{7: 50.0}] * 10
    assert _feed(ComputeWatch(window_s=5.0), burst, share=50) is None
    sustained = [{7: 50.0}] * 6 + [{7: 100.0}] * 10
    tick, mean = _feed(ComputeWatch(window_s=5.0), sustained, share=50)
    assert 6 < tick <= 6 + 5  # within the window of the overshoot starting
    assert mean > 60


def test_after_a_verdict_the_next_needs_a_window_of_its_own() -> None:
    watch = ComputeWatch(window_s=5.0)
    first = _feed(watch, [{7: 100.0}] * 6, share=25)
    assert first is not None
    for t in range(6, 11):  # the same claim, still over: not stopped again at once
        assert watch.observe(float(t), KEY, {8: 100.0}, 25) is None
    assert watch.observe(11.0, KEY, {8: 100.0}, 25) == 100.0


def test_each_repeated_verdict_doubles_the_hold_up_to_the_cap() -> None:
    watch = ComputeWatch(window_s=1.0)
    holds = []
    for t in range(0, 40, 2):  # over its share all along: a verdict every other tick
        watch.observe(float(t), KEY, {7: 100.0}, 25)
        if watch.observe(t + 1.0, KEY, {7: 100.0}, 25) is not None:
            holds.append(watch.hold_s(KEY))
    assert holds[:3] == [FIRST_HOLD_S, 2 * FIRST_HOLD_S, 4 * FIRST_HOLD_S]
    assert max(holds) == MAX_HOLD_S
    watch.forget(set())  # the claim left the node: a new claim starts from the first hold
    assert watch.hold_s(KEY) == FIRST_HOLD_S


def test_a_held_claims_duty_moves_toward_its_share() -> None:
    # Thawed a quarter of the time, the device still ran 40 % (work queued before each freeze):
    # the duty goes down, by half the error; a claim under its share gets more thawed time.
    assert next_duty(0.25, 40.0, 25) == 0.25 - 0.075
    assert next_duty(0.25, 10.0, 25) == 0.25 + 0.075
    assert next_duty(0.03, 100.0, 25) == MIN_DUTY  # never frozen outright
    assert next_duty(0.98, 0.0, 75) == 1.0


def test_claims_that_left_the_node_are_forgotten() -> None:
    watch = ComputeWatch()
    watch.observe(0.0, KEY, {7: 10.0}, 25)
    watch.forget(set())
    assert watch._history == {}
