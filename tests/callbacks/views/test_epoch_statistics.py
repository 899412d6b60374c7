"""EpochStatistics: the per-epoch table in the Text tab and the coverage of the stream."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.plans import write_position_store
from packlm.callbacks.views.epoch_statistics import COLUMNS, EpochStatistics, coverage
from packlm.data.datamodule import PackedDataModule
from packlm.data.store.prepared import PreparedData

LENGTHS = np.random.default_rng(0).integers(1, 60, size=90)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    train = write_position_store(root / "train", LENGTHS, (np.arange(90) % 2).tolist(), ["a", "b"])
    val = write_position_store(root / "val", LENGTHS[:10])
    return PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)


def module(prepared, **keys) -> PackedDataModule:
    keys = {"window": 8, "stride": 6, "batch_size": 4, "num_workers": 0, **keys}
    return PackedDataModule(prepared=prepared, **keys)


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every markdown table row, header and separator lines included."""
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("|")
    ]


def test_the_text_tab_gets_a_table_column_per_epoch_and_the_sources(prepared, tmp_path):
    dm = module(prepared)
    logger = TensorBoardLogger(str(tmp_path), name="tb", version="")
    callback = EpochStatistics(dm)
    for epoch, step in ((0, 0), (1, 23)):
        trainer = SimpleNamespace(loggers=[logger], current_epoch=epoch, global_step=step)
        callback.on_train_epoch_start(trainer, None)
    logger.experiment.flush()
    events = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0, "images": 0})
    events.Reload()
    texts = events.Tensors("data/epoch_statistics/text_summary")
    assert [e.step for e in texts] == [0, 23]
    rows = table_rows(texts[-1].tensor_proto.string_val[0].decode())

    assert rows[0] == ["", "epoch 0", "epoch 1"]
    by_name = {r[0]: r[1:] for r in rows[2:]}
    assert by_name["global step"] == ["0", "23"]
    assert [name for name in by_name if name in {n for _, n, _ in COLUMNS}] == [
        n for _, n, _ in COLUMNS
    ]
    stats = [dm.plan_statistics(epoch) for epoch in (0, 1)]
    assert by_name["samples"] == [f"{s['samples']:,}" for s in stats]
    assert by_name["fill (non-PAD / input)"] == [f"{s['fill_ratio']:.3f}" for s in stats]
    sources = {r[0]: r for r in rows if r[0].startswith("`")}
    assert set(sources) == {"`a`", "`b`"}  # the last epoch's
    assert sum(int(r[1].replace(",", "")) for r in sources.values()) == stats[1]["samples"]
    assert [e.step for e in events.Images("Packing/coverage")] == [0, 23]


@pytest.mark.parametrize(
    "keys",
    [
        dict(packing="stream", stride=8, random_offset=False),
        dict(packing="stream", stride=4),
        dict(packing="document", stride=6),
        dict(packing="document", stride=11, tail="cover"),  # stride > window: gaps
        dict(packing="none", stride=5, tail="pad"),
    ],
)
def test_coverage_over_the_whole_stream_agrees_with_the_plan_statistics(prepared, keys):
    dm = module(prepared, **keys)
    plan, stats = dm.plan(0), dm.plan_statistics(0)
    count, starts, doc_starts = coverage(plan, plan.n_tokens)
    assert count.sum() == stats["supervised_tokens"]
    assert (count == 0).mean() == pytest.approx(stats["never_target_fraction"])
    assert len(starts) == plan.n_samples and len(doc_starts) == plan.n_documents


def test_with_stride_equal_to_window_and_no_offset_each_token_is_a_target_once(prepared):
    dm = module(prepared, packing="stream", stride=8, random_offset=False, tail="drop")
    plan = dm.plan(0)
    count, starts, _ = coverage(plan, 200)  # a stretch: only windows starting before 200
    assert starts.tolist() == list(range(0, 200, 8))
    assert count[0] == 0 and (count[1:] == 1).all()
