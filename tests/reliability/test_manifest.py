"""An edited manifest in the cache (issue 14: counts.tokens +5 made every run fail on the
memmap, -10 was reused silently): detected, rebuilt, and the log line names the file and why."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from helpers.stores import prepare_tiny


@pytest.mark.parametrize("delta", [+5, -10])
@pytest.mark.parametrize("keep_checksum", [True, False])
def test_an_edited_cached_manifest_is_rebuilt_naming_the_file(
    tiny_corpus, tmp_path, caplog, delta, keep_checksum
):
    first = prepare_tiny(tiny_corpus, tmp_path / "cache")
    expected = np.array(first.open("val").tokens)
    path = first.val_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["counts"]["tokens"] += delta
    if not keep_checksum:  # as a store written before manifests had a checksum
        del manifest["manifest_checksum"]
    path.write_text(json.dumps(manifest))
    with caplog.at_level(logging.INFO, logger="packlm"):
        again = prepare_tiny(tiny_corpus, tmp_path / "cache")
    (line,) = [r.getMessage() for r in caplog.records if "building token stores" in r.getMessage()]
    assert "damaged, rebuilding" in line and str(first.val_dir) in line
    assert ("edited since it was written" if keep_checksum else "does not match") in line
    assert np.array_equal(np.array(again.open("val").tokens), expected)
    assert len(again.open("val").tokens) == again.val_manifest["counts"]["tokens"]
