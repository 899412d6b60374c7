"""`python -m packlm.stats`: the composed config's plan statistics, per epoch, as JSON."""

from __future__ import annotations

import json

from hydra import compose, initialize_config_dir

from helpers.processes import run_tool_recording_imports
from packlm.commands.stats import statistics
from packlm.config.schema import CONFIG_DIR, validate_config
from packlm.data.datamodule import PackedDataModule
from packlm.data.epoch.statistics import to_json


def test_statistics_of_a_composed_config(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(60):
        (docs / f"{i:02d}.txt").write_text(f"document {i}: " + "lorem ipsum dolor " * (1 + i % 7))
    overrides = [
        f"data.sources=[{docs}/*.txt]",
        "data.val_fraction=0.2",
        "tokenizer.vocab_size=300",
        f"cache_dir={tmp_path / 'cache'}",
        "data.window=16",
        "data.stride=8",
        "+epochs=2",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=overrides)
    report = json.loads(json.dumps(statistics(cfg, int(cfg.epochs))))
    first, second = report["train"]
    assert (first["epoch"], second["epoch"], first["window"], first["stride"]) == (0, 1, 16, 8)
    assert first["samples"] > 0 and report["val"]["samples"] > 0
    assert report["val"]["stride"] == 16 and report["val"]["overlap_ratio"] == 0
    assert sum(s["samples"] for s in first["sources"].values()) == first["samples"]
    assert 1.5 < first["target_multiplicity_mean"] < 2.0  # stride = window / 2


def test_the_command_imports_neither_torch_nor_lightning_and_agrees_with_the_datamodule(tmp_path):
    """`python -m packlm.stats` plans without the LightningDataModule (about 0.6 s, not 6):
    its statistics are the ones the DataModule that trains computes."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(40):
        (docs / f"{i:02d}.txt").write_text(f"text {i}: " + "alpha beta gamma " * (2 + i % 5))
    overrides = [f"data.sources=[{docs}/*.txt]", "data.val_fraction=0.2",
                 "tokenizer.vocab_size=300", f"cache_dir={tmp_path / 'cache'}", "data.window=16",
                 "data.stride=8", "trainer.profiler=simple"]  # fmt: skip
    out, imported = run_tool_recording_imports("packlm.stats", overrides, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert imported == []
    report = json.loads(out.stdout)

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=overrides)
    dm = PackedDataModule.from_config(validate_config(cfg), cfg.cache_dir)
    dm.setup()
    assert report["train"][0] == json.loads(json.dumps(to_json(dm.plan_statistics(0))))
    assert report["val"] == json.loads(json.dumps(to_json(dm.plan_statistics(0, "val"))))
