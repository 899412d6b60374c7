"""tokenizer.path takes other libraries' files: GPT-2's pair, tokenizer.json, .tiktoken."""

from __future__ import annotations

import base64
import json
import shutil

import pytest

from packlm.config.tokenizer import TokenizerConfig
from packlm.errors import ConfigError
from packlm.tokenizer.formats import from_unicode
from packlm.tokenizer.obtain import get_tokenizer, load_path

EOT, PAD = "<|endoftext|>", "<|pad|>"
TEXT = "Hello, world! Grüße 你好 🙂\n\n  def f(x):\n\treturn x  <|endoftext|>  'tis 1234567"


@pytest.fixture(scope="module")
def gpt2_dir(golden_bpe, tmp_path_factory):
    """GPT-2's two files under the names a GPT-2 checkpoint folder uses."""
    d = tmp_path_factory.mktemp("gpt2")
    shutil.copy(golden_bpe / "gpt2_vocab.json", d / "vocab.json")
    shutil.copy(golden_bpe / "gpt2_merges.txt", d / "merges.txt")
    return d


@pytest.fixture(scope="module")
def gpt2_ranks(golden_bpe) -> dict[bytes, int]:
    table = json.loads((golden_bpe / "gpt2_vocab.json").read_text(encoding="utf-8"))
    return {from_unicode(t): i for t, i in table.items() if t != EOT}


def test_gpt2_pair_directory(gpt2_dir, gpt2_tokenizer):
    tok = load_path(gpt2_dir)
    assert tok.encode(TEXT) == gpt2_tokenizer.encode(TEXT)
    assert tok.special_token_ids == {EOT: 50256, PAD: 50257}  # PAD gets a new id
    tok, where = get_tokenizer(TokenizerConfig(path=str(gpt2_dir)).validate(), {}, None, gpt2_dir)
    assert where == gpt2_dir and tok.vocab_size == 50258


def test_tokenizer_json_written_by_hf_tokenizers(gpt2_dir, tmp_path, gpt2_tokenizer):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers

    hf = tokenizers.Tokenizer(
        models.BPE.from_file(str(gpt2_dir / "vocab.json"), str(gpt2_dir / "merges.txt"))
    )
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([EOT])
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = load_path(tmp_path / "tokenizer.json")
    assert tok.encode(TEXT) == hf.encode(TEXT).ids == gpt2_tokenizer.encode(TEXT)
    assert tok.special_token_ids[EOT] == 50256
    assert load_path(tmp_path).digest() == tok.digest()  # the folder holding it works too


def test_tokenizer_json_round_trip_keeps_a_custom_pattern(small_tokenizer, tmp_path):
    from packlm.tokenizer import Tokenizer

    cl100k = Tokenizer(small_tokenizer.vocab, small_tokenizer.merges, small_tokenizer.special_tokens,
                       pattern="cl100k")  # fmt: skip
    cl100k.save_hf(tmp_path / "tokenizer.json")
    again = load_path(tmp_path / "tokenizer.json", special_tokens=[])
    assert again.digest() == cl100k.digest()


def test_tiktoken_file(tmp_path, gpt2_ranks, gpt2_tokenizer):
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    lines = [
        f"{base64.b64encode(t).decode()} {i}"
        for t, i in sorted(gpt2_ranks.items(), key=lambda x: x[1])
    ]
    (tmp_path / "gpt2.tiktoken").write_text("\n".join(lines) + "\n")  # tiktoken's dump_tiktoken_bpe
    assert load_tiktoken_bpe(str(tmp_path / "gpt2.tiktoken")) == gpt2_ranks
    tok = load_path(tmp_path / "gpt2.tiktoken", special_tokens=[EOT])
    enc = tiktoken.Encoding("g", pat_str=tok.pattern_regex, mergeable_ranks=gpt2_ranks,
                            special_tokens={EOT: 50256})  # fmt: skip
    assert (
        tok.encode(TEXT) == enc.encode(TEXT, allowed_special="all") == gpt2_tokenizer.encode(TEXT)
    )
    assert tok.merges == gpt2_tokenizer.merges  # the merges are recovered exactly
    assert tok.engine == "tiktoken"


def test_bad_paths_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="tokenizer.path=.*not a tokenizer"):
        load_path(tmp_path)
    (tmp_path / "x.tiktoken").write_text("not base64 at all\n")
    with pytest.raises(ConfigError, match=r"x.tiktoken:1: expected 'base64-token rank'"):
        load_path(tmp_path / "x.tiktoken")
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram"}}))
    with pytest.raises(ConfigError, match="only byte-level BPE"):
        load_path(tmp_path / "tokenizer.json")
