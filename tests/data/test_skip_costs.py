"""data.skip_steps with huge steps: counted exactly (a step near 2^63 times the accumulation
wrapped around in int64 and left out batches 0 .. accumulate-1), at no cost until reached."""

from __future__ import annotations

import pytest

from packlm.config.data_checks import _check_skips
from packlm.data.skip import StepSkips
from packlm.errors import ConfigError


@pytest.mark.parametrize("step", [2**62, 2**63, 2**63 + 5, 10**30, 10**12])
@pytest.mark.parametrize("accumulate", [1, 4])
def test_a_huge_skipped_step_leaves_out_no_near_batch(step, accumulate):
    skips = StepSkips.of([3, step], accumulate)
    assert skips.count(0, 0, 40) == accumulate  # step 3's batches only
    assert [b for b in range(40) if skips.dropped(0, b)] == list(
        range(3 * accumulate, 4 * accumulate)
    )
    assert skips.count(step - 1, 0, 2 * accumulate) == accumulate  # reached: left out
    assert skips.plan_step(10) == 11 and skips.logged_step(step) is None


def test_a_long_list_of_skipped_steps_is_checked_in_linear_time():
    steps = list(range(200_000)) + [7]  # quadratic counting took minutes
    with pytest.raises(ConfigError, match=r"^data\.skip_steps: steps \[7\] are listed twice"):
        _check_skips([], steps)
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(ConfigError, match=r"^data\.skip_steps\[1\]="):
            _check_skips([], [0, bad])
