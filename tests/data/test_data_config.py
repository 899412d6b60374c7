"""DataConfig: command-line escapes in data.separator, and the keys named by errors."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from packlm.config.data import DataConfig, expand_escapes
from packlm.config.schema import CONFIG_DIR
from packlm.errors import ConfigError


@pytest.mark.parametrize(
    "typed, meant",
    [
        (r"\n\n", "\n\n"),
        ("\n\n", "\n\n"),
        (r"\t", "\t"),
        (r"a\\nb", "a\\nb"),
        ("<|endoftext|>", "<|endoftext|>"),
    ],
)
def test_separator_escapes_are_expanded(typed, meant):
    assert expand_escapes(typed) == meant


def test_separator_typed_on_the_command_line_is_expanded_exactly_once():
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=[r"data.separator=\n\n"])
        backslashes = compose("config", overrides=[r"data.separator=a\\\\nb"])  # typed a\\nb
    data = DataConfig.from_mapping(cfg.data)
    assert data.separator == "\n\n"
    assert DataConfig(**vars(data)).separator == "\n\n"  # building it again changes nothing
    assert DataConfig.from_mapping(backslashes.data).separator == "a\\nb"


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"sources": []}, "data.sources"),
        ({"sources": [{"path": "a", "weight": 0}]}, r"data.sources\[0\].weight"),
        ({"sources": [{"path": "a", "colour": 1}]}, r"data.sources\[0\]"),
        ({"val_fraction": 1.0}, "data.val_fraction"),
        ({"encoding_errors": "ignore"}, "data.encoding_errors"),
        ({"separator": ""}, "data.separator"),
        ({"num_workers": -1}, "data.num_workers"),
        ({"tail": "wrap"}, "data.tail"),
    ],
)
def test_invalid_values_name_their_key(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        DataConfig(**kwargs).validate()
