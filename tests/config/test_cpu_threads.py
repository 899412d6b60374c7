"""train.cpu_threads: a positive number of torch CPU threads, or null (torch's default)."""

from __future__ import annotations

import pytest

from packlm.config.schema import TrainConfig
from packlm.errors import ConfigError


@pytest.mark.parametrize("threads", [None, 1, 2, 64])
def test_a_positive_count_or_null_is_accepted(threads):
    assert TrainConfig(cpu_threads=threads).validate().cpu_threads == threads


@pytest.mark.parametrize("threads", [0, -1, -(2**70), True, 1.5, "2"])
def test_anything_else_names_the_key(threads):
    with pytest.raises(ConfigError, match=r"^train\.cpu_threads=.*: must be a positive integer"):
        TrainConfig(cpu_threads=threads).validate()
