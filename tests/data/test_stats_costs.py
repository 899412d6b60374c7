"""`python -m packlm.stats +epochs=N`: N plans of the whole corpus, so a huge N is refused in
one line naming the key before any plan is built (it ran for hours, holding every epoch's
statistics)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from packlm.commands.stats import MAX_EPOCHS, stats_epochs
from packlm.errors import ConfigError


@pytest.mark.parametrize("value", [MAX_EPOCHS + 1, 10**9, 2**63, 0, -3])
@pytest.mark.parametrize("key", ["epochs", "stats_epochs"])
def test_an_epoch_count_out_of_range_is_one_line_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=rf"^\+{key}={value}: an integer from 1 to") as e:
        stats_epochs(OmegaConf.create({key: value}))
    assert "\n" not in str(e.value)
    assert stats_epochs(OmegaConf.create({key: MAX_EPOCHS})) == MAX_EPOCHS
