"""The pictures' palette, and the clear error a picture callback gives without matplotlib."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from packlm.callbacks.views.batch_images import BatchImages
from packlm.callbacks.views.render import DOCUMENT_COLOURS, PAD_COLOUR, document_colours, lighten


def test_without_matplotlib_a_picture_callback_fails_when_created_naming_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(ImportError, match="pip install matplotlib.*log_batch_images=false"):
        BatchImages()


def test_documents_cycle_through_distinct_colours_and_pad_is_none_of_them():
    seg = np.array([[0, 1, 2, -1], [len(DOCUMENT_COLOURS), 0, -1, -1]])
    colours = document_colours(seg)  # [2, 4, 3]
    assert len({tuple(c) for c in DOCUMENT_COLOURS}) == len(DOCUMENT_COLOURS)
    assert not (DOCUMENT_COLOURS == PAD_COLOUR).all(axis=1).any()
    assert (colours[seg < 0] == PAD_COLOUR).all()
    assert (colours[1, 0] == DOCUMENT_COLOURS[0]).all()  # cycles
    pale = lighten(DOCUMENT_COLOURS)
    assert (pale >= DOCUMENT_COLOURS).all()  # lighter, and never a document colour itself
    assert not (pale[:, None] == DOCUMENT_COLOURS[None]).all(axis=-1).any()
