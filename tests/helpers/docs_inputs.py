"""The files README.md and docs/ name, written small into a folder, so their commands run as
written there: corpus.txt, corpus/*.txt, data/*.jsonl.gz, shards/*.parquet, a save_to_disk
folder, a code tree, books/ and web.jsonl, input.txt, held_out/, a mixture's web/*.jsonl.zst,
code/ and math.jsonl, and a GPT-2 tokenizer folder (from ../shared, when it is there)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from helpers.corpus import write_tiny_corpus

SHARED_GPT2 = Path(__file__).resolve().parents[3] / "shared" / "golden" / "bpe"


def write_docs_inputs(root: Path) -> Path:
    texts = [p.read_text() for p in sorted(write_tiny_corpus(root / "corpus").glob("*.txt"))]
    (root / "corpus.txt").write_text("\n\n".join(texts))
    (root / "input.txt").write_text("\n".join(texts))
    (root / "held_out").mkdir()
    (root / "held_out" / "a.txt").write_text("\n".join(texts[::7]))
    write_tiny_corpus(root / "books", n=20, seed=1)
    with open(root / "web.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts[::2])
    (root / "data").mkdir()
    with gzip.open(root / "data" / "code.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"content": t}) + "\n" for t in texts)
    # a mixture's sources: web/*.jsonl.zst, code/, math.jsonl
    (root / "code").mkdir()
    for i, t in enumerate(texts[1::3]):
        (root / "code" / f"m{i}.py").write_text(f"def g{i}():\n    return {t!r}\n")
    with open(root / "math.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts[::5])
    try:
        import zstandard
    except ImportError:
        pass  # the line that reads them needs packlm[zstd] and says so
    else:
        (root / "web").mkdir()
        for k in range(2):
            data = "".join(json.dumps({"text": t}) + "\n" for t in texts[k::2]).encode()
            (root / "web" / f"part-{k}.jsonl.zst").write_bytes(zstandard.compress(data))
    for name in ("pkg", "pkg/tests"):
        (root / "repo" / name).mkdir(parents=True)
    for i, t in enumerate(texts[:20]):
        (root / "repo" / "pkg" / f"m{i}.py").write_text(f"def f{i}():\n    return {t!r}\n")
    (root / "repo" / "pkg" / "tests" / "test_m.py").write_text("def test_m(): ...\n")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        pass  # the lines that read them need packlm[arrow] and say so
    else:
        table = pa.table({"text": texts})
        (root / "shards").mkdir()
        pq.write_table(table, root / "shards" / "part-0.parquet", row_group_size=16)
        saved = root / "hf_dataset_dir" / "train"
        saved.mkdir(parents=True)
        stream = str(saved / "data-00000-of-00001.arrow")
        with pa.OSFile(stream, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}
        (saved / "state.json").write_text(json.dumps(state))
        (saved / "dataset_info.json").write_text("{}")
    if SHARED_GPT2.is_dir():
        (root / "gpt2").mkdir()
        shutil.copy(SHARED_GPT2 / "gpt2_vocab.json", root / "gpt2" / "vocab.json")
        shutil.copy(SHARED_GPT2 / "gpt2_merges.txt", root / "gpt2" / "merges.txt")
    return root
