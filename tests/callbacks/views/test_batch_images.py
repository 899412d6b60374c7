"""BatchImages: the mask of the busiest row and the batch layout, read back from TensorBoard."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.models import cat_rows, pack_row
from packlm.callbacks.views.batch_images import (
    CONTEXT_WHITE,
    BatchImages,
    busiest_row,
    layout_pixels,
)
from packlm.callbacks.views.render import DOCUMENT_COLOURS, PAD_COLOUR, lighten

T = 32


def logged_images(tmp_path, batch) -> dict[str, np.ndarray]:
    """Run BatchImages on `batch` into a real event file and decode its PNGs (TensorBoard is
    the second logger: the pictures find it)."""
    logger = TensorBoardLogger(str(tmp_path), name="tb", version="")
    trainer = SimpleNamespace(loggers=[CSVLogger(str(tmp_path)), logger], global_step=0)
    BatchImages().on_train_batch_start(trainer, None, batch, 0)
    logger.experiment.flush()
    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    return {
        tag: np.asarray(Image.open(io.BytesIO(events.Images(tag)[-1].encoded_image_string)))[
            ..., :3
        ]
        for tag in events.Tags()["images"]
    }


def colours_present(image: np.ndarray, palette: np.ndarray, min_pixels: int = 30) -> int:
    """How many colours of `palette` cover at least `min_pixels` pixels of the image."""
    pixels = image.reshape(-1, 3)
    return sum(int((pixels == c).all(axis=1).sum() >= min_pixels) for c in palette)


def batch_of(*rows: list[list[int]]) -> dict[str, torch.Tensor]:
    return cat_rows(*(pack_row(docs, T) for docs in rows))


def test_the_mask_shows_the_row_with_the_most_documents_one_colour_each(tmp_path):
    many = [list(range(1, 8)), list(range(10, 16)), list(range(20, 29)), list(range(30, 36))]
    batch = batch_of([list(range(1, 33))], many, [list(range(1, 20)), list(range(3, 9))])
    assert busiest_row(batch["segment_ids"]) == 1  # 4 documents, PAD at the end
    images = logged_images(tmp_path, batch)
    assert set(images) == {"Packing/attention_mask", "Packing/batch_layout"}

    mask = images["Packing/attention_mask"]
    assert colours_present(mask, DOCUMENT_COLOURS) == len(many)
    assert colours_present(mask, PAD_COLOUR[None], min_pixels=1) == 1


def test_a_one_document_row_shows_one_colour(tmp_path):
    mask = logged_images(tmp_path, batch_of([list(range(1, 33))]))["Packing/attention_mask"]
    assert colours_present(mask, DOCUMENT_COLOURS) == 1


def test_layout_colours_documents_targets_and_pad():
    batch = batch_of([list(range(1, 8)), list(range(10, 16))], [list(range(1, 33))])
    pixels = layout_pixels(batch["segment_ids"], batch["labels"])  # [B, T, 3]
    seg, labels = batch["segment_ids"], batch["labels"]
    pad = (seg < 0).numpy()
    assert pad.any() and (pixels[pad] == PAD_COLOUR).all()
    scored = (labels != -100).numpy()
    assert (pixels[scored] == DOCUMENT_COLOURS[seg.numpy()[scored]]).all()
    # the last token of document 0 in row 0 predicts nothing: pale, not a document colour
    last = len(range(1, 8)) - 1
    assert labels[0, last] == -100
    assert (pixels[0, last] == lighten(DOCUMENT_COLOURS[0])).all()


def chat_batch(mask: bool) -> dict[str, torch.Tensor]:
    """Two rows of T: a conversation (context, then an answer) and plain text, then PAD; with
    `mask` the conversation's context targets are dropped as data.chat_supervised drops them."""
    from packlm.batch import make_batch

    tokens = np.zeros((2, T + 1), dtype=np.int64)
    segments = np.full((2, T + 1), -1, dtype=np.int32)
    segments[0, :12], segments[0, 12:20] = 0, 1  # conversation 12 tokens, text 8, PAD
    segments[1, : T + 1] = 0  # one document filling the row
    tokens[segments >= 0] = np.arange(1, (segments >= 0).sum() + 1)
    supervised = np.ones((2, T + 1), dtype=bool)
    if mask:
        supervised[0, :8] = False  # the conversation's first 8 tokens: user turn and markup
    batch = make_batch(tokens, segments, "document", supervised=supervised)
    return {k: torch.from_numpy(v) for k, v in batch.items()}


def test_layout_tells_masked_context_from_document_ends_and_pad(tmp_path):
    """Three shades besides PAD: target, context (next token its document's but masked),
    boundary (no next token of its document)."""
    batch = chat_batch(mask=True)
    pixels = layout_pixels(batch["segment_ids"], batch["labels"])
    blue, orange = DOCUMENT_COLOURS[0], DOCUMENT_COLOURS[1]
    context, boundary = lighten(blue, CONTEXT_WHITE), lighten(blue)
    assert len({tuple(c) for c in (blue, context, boundary, PAD_COLOUR)}) == 4
    assert (pixels[0, :7] == context).all()  # targets 1..7 masked, same document next
    assert (pixels[0, 7:11] == blue).all()  # targets 8..11: the answer, supervised
    assert (pixels[0, 11] == boundary).all()  # the conversation's last token: its end
    assert (pixels[0, 12:19] == orange).all() and (pixels[0, 19] == lighten(orange)).all()
    assert (pixels[0, 20:] == PAD_COLOUR).all() and (pixels[1] == blue).all()
    # the rendered image shows the context shade, and a run without a mask shows none
    shade = context[None]
    image = logged_images(tmp_path / "masked", batch)["Packing/batch_layout"]
    assert colours_present(image, shade) == 1
    plain = chat_batch(mask=False)
    assert (layout_pixels(plain["segment_ids"], plain["labels"])[0, :11] == blue).all()
    image = logged_images(tmp_path / "plain", plain)["Packing/batch_layout"]
    assert colours_present(image, shade, min_pixels=1) == 0
    assert colours_present(image, lighten(blue)[None]) == 1  # boundaries still shown
