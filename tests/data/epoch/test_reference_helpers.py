"""The reference implementations of helpers.plans agree with hand-worked examples."""

from __future__ import annotations

from helpers.plans import reference_packs, reference_windows


def test_reference_packs_examples():
    assert reference_packs([5, 3, 10, 1, 7, 2, 20], 9) == [[0, 1], [2], [3, 4], [5], [6]]
    assert reference_packs([], 9) == []


def test_reference_windows_examples():
    # T=4, stride=3: a 10-token sequence has full windows at 0 and 3; tokens 8..9 are the tail
    assert reference_windows([10], [0], 4, 3, "drop") == [(0, 5), (3, 5)]
    assert reference_windows([10], [0], 4, 3, "cover") == [(0, 5), (3, 5), (5, 5)]
    assert reference_windows([10], [0], 4, 3, "pad") == [(0, 5), (3, 5), (6, 4)]
    assert reference_windows([3, 5], [0, 0], 4, 3, "drop") == [(0, 3), (3, 5)]
