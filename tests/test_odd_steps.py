"""analysis.odd_steps on step durations whose odd steps are known by construction."""
import numpy as np

from tfbneck_plugin.analysis.odd_steps import odd_steps

MS = 10 ** 9  # ps


def _odd(durations_ms):
    return [i for i, flag in enumerate(odd_steps(np.array(durations_ms) * MS)) if flag]


def test_one_slow_step_in_quiet_ones_is_odd():
    assert _odd([2.0, 2.1, 1.9, 2.0, 40.0, 2.05, 2.0]) == [4]


def test_jitter_and_too_few_steps_are_not_odd():
    assert _odd([2.0, 2.3, 1.8, 2.1, 2.6, 1.9]) == []
    assert _odd([2.0, 2.0, 40.0]) == []  # under MIN_STEPS


def test_a_bimodal_window_is_a_pattern():
    # Half the steps refill a buffer: 2.5x, no gap between them.
    assert _odd([2.0, 5.0, 2.0, 5.1, 2.1, 4.9, 2.0, 5.0]) == []
    # Two of eight at 2.5x and 2.6x: within the share, both odd.
    assert _odd([2.0, 5.0, 2.0, 2.1, 2.0, 5.2, 2.0, 1.9]) == [1, 5]


def test_an_accident_among_jittery_steps_stays_odd():
    # A busy host: two steps of 4x and 2.6x the median, and one of 40x. Three steps of eight
    # pass the z-score test (over the quarter); the 40x one is >= 2x the slowest of the rest.
    d = [9.17, 2.10, 5.92, 2.14, 100.0, 2.3, 2.2, 2.4]
    assert _odd(d) == [4]
    # Without that gap (the slowest 2.5x the median, the next 2.4x) none is odd.
    assert _odd([5.0, 2.0, 4.8, 2.0, 5.1, 2.0, 2.1, 2.0]) == []
