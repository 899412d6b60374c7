"""Show one real batch in TensorBoard: its attention mask and its segment/label layout.

The pictures are what the model gets: the block-diagonal mask of the first row (white =
may attend, padding visible as the lone diagonal at the end), and for every row the
document segments (one colour each, PAD black) above the supervised targets (white).
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from packlm.model.masks import allowed

PALETTE = np.array(  # segment colours, cycled; PAD is black
    [
        [230, 159, 0],
        [86, 180, 233],
        [0, 158, 115],
        [240, 228, 66],
        [0, 114, 178],
        [213, 94, 0],
        [204, 121, 167],
    ],
    dtype=np.uint8,
)


def mask_image(segment_ids: torch.Tensor) -> np.ndarray:
    """uint8 [T, T] image of allowed(i, j) for one row: 255 where query i may see key j."""
    return allowed(segment_ids[None].cpu())[0].numpy().astype(np.uint8) * 255  # [T, T]


def layout_image(segment_ids: torch.Tensor, labels: torch.Tensor, scale: int = 4) -> np.ndarray:
    """uint8 [2*B*scale, T, 3]: per row, the segments (colours) over the supervised targets (white)."""
    seg = segment_ids.cpu().numpy()  # [B, T]
    colours = PALETTE[np.mod(seg, len(PALETTE))]  # [B, T, 3]
    colours[seg < 0] = 0
    supervised = (labels.cpu().numpy() != -100)[..., None] * np.uint8(255)  # [B, T, 1]
    supervised = np.repeat(supervised, 3, axis=-1)
    rows = np.stack([colours, supervised], axis=1).reshape(-1, seg.shape[1], 3)  # [2B, T, 3]
    return np.repeat(rows, scale, axis=0)


class BatchImages(L.Callback):
    """Log the first training batch's mask and layout once, at the start of training."""

    def __init__(self) -> None:
        self.done = False

    @rank_zero_only
    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        if self.done or not isinstance(trainer.logger, TensorBoardLogger):
            return
        self.done = True
        writer = trainer.logger.experiment
        step = trainer.global_step
        writer.add_image(
            "data/attention_mask_row0", mask_image(batch["segment_ids"][0]), step, dataformats="HW"
        )
        writer.add_image(
            "data/segments_over_targets",
            layout_image(batch["segment_ids"], batch["labels"]),
            step,
            dataformats="HWC",
        )
