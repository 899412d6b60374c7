"""A mixture deals every row of a batch (none is clamped to a split's size, as a plain run's
are), so a batch too large to hold is refused in one line before any work."""

from __future__ import annotations

import pytest

from packlm.config.data import DataConfig
from packlm.config.mixture import MAX_ROWS
from packlm.errors import ConfigError

SOURCES = [{"path": "a.txt", "share": 0.5}, {"path": "b.txt", "share": 0.5}]


@pytest.mark.parametrize("batch_size", [MAX_ROWS + 1, 10**12])
def test_a_mixture_batch_too_large_to_hold_is_refused_naming_the_key(batch_size):
    with pytest.raises(ConfigError, match=r"^data\.batch_size=\d+: a mixture") as refused:
        DataConfig.from_mapping({"sources": SOURCES, "batch_size": batch_size}).validate()
    assert len(str(refused.value).splitlines()) == 1


def test_the_largest_mixture_batch_and_any_plain_batch_are_accepted():
    DataConfig.from_mapping({"sources": SOURCES, "batch_size": MAX_ROWS}).validate()
    DataConfig.from_mapping({"sources": ["a.txt"], "batch_size": 10**12}).validate()
