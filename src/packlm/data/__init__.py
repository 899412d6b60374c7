"""The data path, in two halves and the DataModule that wires them (DESIGN.md "Data flow").

Prepare time, once per fingerprint (`packlm.data.store`):
    sources -> documents -> tokenizer (`packlm.tokenizer.obtain`) -> token store
Epoch time, every epoch, in every rank and worker (`packlm.data.epoch`):
    token store -> epoch plan (order -> packing -> windows) -> samples -> collate -> statistics

1. `packlm.config.data`: the `data` config group (`DataConfig`), validated before any work.
2. `store/`: `prepare_stores` -> tokenizer + train/val `TokenStore`s, cached.
3. `epoch/`: `build_plan` -> `EpochPlan` -> `PlanSampler` -> `PlanDataLoader` -> batches.
4. `plans.py`: `EpochPlans`, stores -> epoch plans and statistics (no torch, no Lightning).
5. `datamodule.py`: `PackedDataModule`, the LightningDataModule: EpochPlans + loaders.

Nothing in `store/` imports `epoch/`; neither imports the model. `PackedDataModule` is
imported on first use, so reading a store does not import Lightning.
"""

from packlm.config.data import DataConfig

__all__ = ["DataConfig", "PackedDataModule"]


def __getattr__(name: str):
    if name == "PackedDataModule":
        from packlm.data.datamodule import PackedDataModule

        return PackedDataModule
    raise AttributeError(f"module 'packlm.data' has no attribute {name!r}")
