"""`python -m packlm.prepare`'s summary: per split documents, tokens, UTF-8 bytes read and
bytes stored (the stored tokens decoded, EOS excluded), equal for every source type and
pre-tokenization pattern; what reading skipped is counted and printed."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

import pytest

from helpers.processes import run_tool_recording_imports
from packlm.commands.prepare import format_summary, summary
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store import encode
from packlm.data.store.prepared import prepare_stores

TEXTS = ["Plain text, déjà vu — 你好。\n\nA second paragraph <|endoftext|> inside.\n",
         "gzip'd text:   many   spaces\tand\ttabs 12345\n",
         "código fuente = {'x': 1}\n    return x  # 🙂\n"]  # fmt: skip
RECORDS = ['a JSONL record with "quotes"', "Ωμέγα second record", "third\nwith a newline"]
ROWS = ["a Parquet row", "another Parquet row 42"]


def write_sources(root):
    """Every source type; returns (entries, the documents' texts)."""
    (root / "plain.txt").write_text(TEXTS[0], encoding="utf-8")
    with gzip.open(root / "packed.txt.gz", "wt", encoding="utf-8") as f:
        f.write(TEXTS[1])
    lines = "".join(json.dumps({"text": t}) + "\n" for t in RECORDS)
    (root / "records.jsonl").write_text(lines, encoding="utf-8")
    tree = root / "tree"
    tree.mkdir()
    (tree / "code.py").write_text(TEXTS[2], encoding="utf-8")
    (tree / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0binary")  # skipped, counted
    (tree / "empty.txt").write_text("")  # empty: counted
    entries = [str(root / "plain.txt"), str(root / "packed.txt.gz"), str(root / "records.jsonl"),
               str(tree)]  # fmt: skip
    texts = TEXTS + RECORDS
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return entries, texts
    pq.write_table(pa.table({"text": ROWS}), root / "rows.parquet")
    return [*entries, str(root / "rows.parquet")], texts + ROWS


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", r"\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+"])
def test_bytes_read_equal_bytes_stored_for_every_source_and_pattern(tmp_path, monkeypatch, pattern):
    monkeypatch.setattr(encode, "PIECE_CHARS", 16)  # the longer documents go in pieces
    monkeypatch.setattr(encode, "MAX_PRETOKEN_CHARS", 4)
    entries, texts = write_sources(tmp_path)
    data = DataConfig(sources=entries, val_fraction=0.3)
    tok = TokenizerConfig(vocab_size=300, pattern=pattern)
    prepared = prepare_stores(data, tok, tmp_path / "cache", progress=False, num_workers=0)
    rows = summary(prepared)
    expected = sum(len(t.encode("utf-8")) for t in texts)
    assert rows["train"]["bytes_read"] + rows["val"]["bytes_read"] == expected
    for row in rows.values():
        assert row["bytes_stored"] == row["bytes_read"]
    assert rows["train"]["documents"] + rows["val"]["documents"] == len(texts)
    assert rows["train"]["dropped"]["binary"] == 1 and rows["train"]["dropped"]["empty"] == 1
    printed = format_summary(rows)
    skipped = next(line for line in printed.splitlines() if line.startswith("train skipped:"))
    assert "1 binary" in skipped and "1 empty" in skipped
    assert f"{rows['train']['bytes_read']:,}" in printed and " NO" not in printed


def test_cli_prints_the_summary(tmp_path):
    entries, texts = write_sources(tmp_path)
    args = [sys.executable, "-m", "packlm.prepare", f"data.sources=[{','.join(entries)}]",
            "data.val_fraction=0", "tokenizer.vocab_size=300", f"cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)["summary"]
    assert rows["train"]["bytes_read"] == rows["train"]["bytes_stored"]
    assert rows["train"]["bytes_read"] == sum(len(t.encode("utf-8")) for t in texts)
    skipped = next(line for line in out.stderr.splitlines() if line.startswith("train skipped:"))
    assert "bytes read" in out.stderr and "1 binary" in skipped and "1 empty" in skipped
    for phase in ("pre-tokenizing", "merging", "token store", "verifying"):  # each with a total
        assert re.search(rf"{phase}:\s+\d+%\|", out.stderr), phase


def test_prepare_imports_neither_torch_nor_lightning(tmp_path):
    """Building the cache needs no model: a login node's prepare job composes train.py's
    config (every trainer.* key included) without importing torch (6-9 s and 400 MB)."""
    entries, _ = write_sources(tmp_path)
    argv = ["prepare", f"data.sources=[{','.join(entries)}]", "data.val_fraction=0.3",
            "tokenizer.vocab_size=300", f"cache_dir={tmp_path / 'cache'}",
            "trainer.profiler=simple", "trainer.max_time=00:00:01:00"]  # fmt: skip
    out, imported = run_tool_recording_imports("packlm.prepare", argv[1:], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["summary"]["val"]["documents"] > 0
    assert imported == []
