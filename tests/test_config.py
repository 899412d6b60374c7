"""Each config default is written once: in the dataclasses. conf/ restates none of them,
every key has a docstring, and docs/configuration.md's table is the one they generate."""

from __future__ import annotations

import importlib.util
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from packlm.config.model import ModelConfig
from packlm.config.schema import CONFIG_DIR, PackLMConfig
from packlm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def config_table():
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "docs" / "config_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GROUPS = {
    f.name: type(f.default_factory())
    for f in fields(PackLMConfig)
    if f.default_factory is not MISSING
}


def test_the_configuration_table_is_current():
    table = config_table()
    readme = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert table.with_table(readme) == readme, "run: python docs/config_table.py"


def test_every_key_has_a_meaning():
    missing = [key for key, _, meaning in config_table().rows() if not meaning]
    assert missing == []


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_group_files_restate_no_default(group):
    defaults = GROUPS[group]()
    for path in sorted((Path(CONFIG_DIR) / group).glob("*.yaml")):
        values = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
        restated = [
            k
            for k, v in values.items()
            if k in {f.name for f in fields(defaults)} and v == _plain(getattr(defaults, k))
        ]
        assert restated == [], f"{path} restates the dataclass defaults of {restated}"


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def test_one_converter_names_an_unknown_key_for_every_group():
    for name, cls in GROUPS.items():
        with pytest.raises(ConfigError, match=rf"^{name}\.colour: unknown key"):
            cls.from_mapping({"colour": 1})
    assert ModelConfig.from_mapping(None) == ModelConfig()
