"""format=hf: transformers' Auto classes load the folder offline and compute packlm's logits."""

from __future__ import annotations

import json

import pytest
import torch
from hydra import compose, initialize_config_dir

from helpers.exports import TEXTS, write_checkpoint
from packlm.config.schema import CONFIG_DIR
from packlm.errors import ConfigError
from packlm.model.sampling import sample_tokens

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")


def run_export(*overrides: str) -> dict:
    from packlm.commands.export.__main__ import export

    with initialize_config_dir(CONFIG_DIR, version_base=None):
        return export(compose("export", overrides=list(overrides)))


@pytest.mark.parametrize("model", [{}, {"tie_embeddings": False, "n_head": 4, "rope_base": 500.0}])
def test_hf_model_gives_packlm_logits_and_greedy_text(tmp_path, tiny_tokenizer, model):
    ckpt = tmp_path / "last.ckpt"
    module = write_checkpoint(ckpt, tiny_tokenizer, **model)
    out = tmp_path / "hf"
    summary = run_export("format=hf", f"ckpt_path={ckpt}", f"out={out}")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(summary["files"])

    hf = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in hf.parameters()) == module.model.num_parameters()
    ids = torch.tensor([tiny_tokenizer.encode(TEXTS[2])[:30]])  # [1, T]
    with torch.no_grad():
        diff = (hf(ids).logits - module(ids)).abs().max().item()
    assert diff < 1e-4

    prompt = ids[0, :6].tolist()
    ours = sample_tokens(lambda x: module(x), prompt, 12, 32, temperature=0.0)
    theirs = hf.generate(ids[:, :6], max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert theirs[0, 6:].tolist() == ours


def test_hf_tokenizer_has_packlm_ids_and_special_roles(tmp_path, tiny_ckpt, tiny_tokenizer):
    ckpt, _ = tiny_ckpt
    out = tmp_path / "hf"
    run_export("format=hf", f"ckpt_path={ckpt}", f"out={out}")
    hf_tok = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = "Grüße 你好 🙂 \u0c5c\U000323b0's def f(x):\n\treturn x<|endoftext|>The fox"
    assert hf_tok(text)["input_ids"] == tiny_tokenizer.encode(text)
    assert hf_tok.decode(tiny_tokenizer.encode(text)) == text
    ids = tiny_tokenizer.special_token_ids
    assert (hf_tok.eos_token_id, hf_tok.pad_token_id) == (ids["<|endoftext|>"], ids["<|pad|>"])
    assert hf_tok.bos_token_id == ids["<|endoftext|>"]  # no BOS token: GPT-2's habit
    batch = hf_tok(["a", "The quick brown fox"], padding=True)
    assert batch["input_ids"][0][-1] == ids["<|pad|>"] and batch["attention_mask"][0][-1] == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["eos_token_id"], config["pad_token_id"]) == (
        ids["<|endoftext|>"],
        ids["<|pad|>"],
    )


def test_export_refuses_bad_requests_before_writing(tmp_path, tiny_ckpt):
    ckpt, _ = tiny_ckpt
    with pytest.raises(ConfigError, match="format='onnx'"):
        run_export("format=onnx", f"ckpt_path={ckpt}", f"out={tmp_path / 'a'}")
    with pytest.raises(ConfigError, match="ckpt_path"):
        run_export("format=hf", f"out={tmp_path / 'b'}")
    with pytest.raises(ConfigError, match="no such checkpoint"):
        run_export("format=hf", f"ckpt_path={tmp_path / 'missing.ckpt'}", f"out={tmp_path / 'c'}")
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        run_export("format=hf", f"ckpt_path={ckpt}", f"out={full}")
    assert (full / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


@pytest.mark.slow
def test_a_train_py_checkpoint_exports(tiny_corpus, tmp_path):
    """The real thing: train.py's checkpoint -> hf folder -> the same logits."""
    from helpers.runs import run_train, tiny_overrides
    from packlm.checkpoint.load import load_checkpoint
    from packlm.model.transformer import Transformer

    done = run_train(tiny_overrides(tiny_corpus, tmp_path / "cache", steps=2, lean=True), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (ckpt,) = tmp_path.glob("outputs/*/*/checkpoints/last.ckpt")
    run_export("format=hf", f"ckpt_path={ckpt}", f"out={tmp_path / 'hf'}")
    saved = load_checkpoint(ckpt)
    model = Transformer(saved.model).eval()
    model.load_state_dict(saved.weights)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.tensor([saved.tokenizer.encode((tiny_corpus / "doc001.txt").read_text())[:32]])
    with torch.no_grad():
        assert (hf(ids).logits - model(ids)).abs().max().item() < 1e-4


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ({"qk_norm": True}, "model.qk_norm=true"),
        ({"mlp": "relu2"}, "model.mlp=relu2"),
        ({"logit_softcap": 15.0}, "model.logit_softcap=15.0"),
        ({"residual_scalars": True}, "model.residual_scalars=true"),
    ],
)
def test_options_llama_lacks_are_refused_in_one_line(tmp_path, tiny_tokenizer, model, named):
    ckpt = tmp_path / "last.ckpt"
    write_checkpoint(ckpt, tiny_tokenizer, **model)
    out = tmp_path / "hf"
    with pytest.raises(ConfigError, match=rf"^format=hf: the checkpoint's {named} has no Llama"):
        run_export("format=hf", f"ckpt_path={ckpt}", f"out={out}")
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_zero_init_proj_exports_as_usual(tmp_path, tiny_tokenizer):
    ckpt = tmp_path / "last.ckpt"
    write_checkpoint(ckpt, tiny_tokenizer, zero_init_proj=True)
    summary = run_export("format=hf", f"ckpt_path={ckpt}", f"out={tmp_path / 'hf'}")
    assert "model.safetensors" in summary["files"]
