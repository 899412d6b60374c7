"""format=tiktoken: tiktoken's own loader reads the files and gives packlm's ids."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from packlm.config.schema import CONFIG_DIR

tiktoken = pytest.importorskip("tiktoken")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

TEXT = "Grüße 你好 🙂 \u0c5c\U000323b0's def f(x):\n\treturn x<|endoftext|>The fox<|pad|>"  # U+0C5C, U+323B0: Unicode 16, 17


def run_export(*overrides: str) -> dict:
    from packlm.commands.export.__main__ import export

    with initialize_config_dir(CONFIG_DIR, version_base=None):
        return export(compose("export", overrides=list(overrides)))


def load(out):
    config = json.loads((out / "tiktoken_config.json").read_text())
    return tiktoken.Encoding(
        mergeable_ranks=load_tiktoken_bpe(str(out / "tokenizer.tiktoken")), **config
    )


def test_tiktoken_files_from_a_checkpoint(tmp_path, tiny_ckpt, tiny_tokenizer):
    ckpt, _ = tiny_ckpt
    summary = run_export("format=tiktoken", f"ckpt_path={ckpt}", f"out={tmp_path / 'tk'}")
    assert summary["files"] == ["tiktoken_config.json", "tokenizer.tiktoken"]
    enc = load(tmp_path / "tk")
    assert enc.encode(TEXT, allowed_special="all") == tiny_tokenizer.encode(TEXT)
    assert enc.encode_ordinary(TEXT) == tiny_tokenizer.encode_ordinary(TEXT)
    assert enc.n_vocab == tiny_tokenizer.vocab_size


def test_tiktoken_files_from_gpt2s_tokenizer_path(tmp_path, golden_bpe):
    """tokenizer.path=<GPT-2's files> -> .tiktoken: the ids of tiktoken's own GPT-2."""
    from packlm.tokenizer import Tokenizer

    gpt2 = Tokenizer.from_files(golden_bpe / "gpt2_vocab.json", golden_bpe / "gpt2_merges.txt",
                                ["<|endoftext|>"])  # fmt: skip
    saved = tmp_path / "gpt2"
    gpt2.save(saved)
    run_export("format=tiktoken", f"tokenizer.path={saved}", f"out={tmp_path / 'tk'}")
    enc = load(tmp_path / "tk")
    text = TEXT.replace("<|pad|>", "")
    assert enc.encode(text, allowed_special="all") == gpt2.encode(text)
    assert enc.eot_token == 50256
