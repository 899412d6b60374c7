"""TrainingRowText: one real training row decoded, documents and unsupervised spans marked."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.stores import prepare, write_corpus
from packlm.callbacks.views.batch_images import busiest_row
from packlm.callbacks.views.row_text import TrainingRowText, marked_row
from packlm.data.datamodule import PackedDataModule

MARKER = re.compile(r"⟦doc \d+⟧|⟨PAD×\d+⟩|[«»]")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    return prepare(root, tmp_path_factory.mktemp("cache"))


def first_batch(prepared, **keys) -> dict[str, torch.Tensor]:
    keys = {"window": 48, "stride": 48, "batch_size": 8, "num_workers": 0, **keys}
    dm = PackedDataModule(prepared=prepared, progress=False, **keys)
    return next(iter(dm.train_dataloader()))


def body(markdown: str) -> str:
    return markdown.split("```\n", 1)[1].rsplit("\n```", 1)[0]


@pytest.mark.parametrize("packing", ["document", "stream"])
def test_the_marked_row_is_the_row_text_with_its_documents_and_unsupervised_spans(
    prepared, packing
):
    batch = first_batch(prepared, packing=packing, pack_size=49 if packing == "document" else None)
    row = busiest_row(batch["segment_ids"])
    ids, labels, seg = (batch[k][row] for k in ("input_ids", "labels", "segment_ids"))
    text = body(marked_row(prepared.tokenizer, ids, labels, seg))

    assert MARKER.sub("", text) == prepared.tokenizer.decode(ids[seg >= 0].tolist())
    assert text.count("⟦doc ") == int(seg.max()) + 1
    target = torch.zeros_like(labels, dtype=torch.bool)
    target[1:] = labels[:-1] != -100
    inputs_only = ~target & (seg >= 0)  # real tokens that are no position's target
    runs = int(inputs_only[0]) + int((inputs_only[1:] & ~inputs_only[:-1]).sum())
    runs += int((inputs_only[1:] & inputs_only[:-1] & (seg[1:] != seg[:-1])).sum())
    assert text.count("«") == text.count("»") == runs
    n_pad = int((seg < 0).sum())
    assert ("⟨PAD×" in text) == (n_pad > 0)


def test_the_callback_logs_the_busiest_row_once(prepared, tmp_path):
    batch = first_batch(prepared, packing="document", pack_size=49)
    logger = TensorBoardLogger(str(tmp_path), name="tb", version="")
    callback = TrainingRowText(prepared.tokenizer)
    for step in (0, 1):
        callback.on_train_batch_start(
            SimpleNamespace(loggers=[logger], global_step=step), None, batch, 0
        )
    logger.experiment.flush()
    events = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    (event,) = events.Tensors("data/training_row/text_summary")
    text = event.tensor_proto.string_val[0].decode()
    assert text.startswith(f"batch row {busiest_row(batch['segment_ids'])}")
    assert "⟦doc 1⟧" in text  # pack_size = window + 1 packs several documents in a row
