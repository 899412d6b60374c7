"""Each issue 61 model option through each export (docs/recipe.md's table): format=hf
refuses what Llama lacks in one line naming every such key and loses nothing already
written; nanogpt, megatron and tiktoken export token data or the tokenizer, byte for byte
what a checkpoint without the options gives."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from hydra import compose, initialize_config_dir

from helpers.exports import write_checkpoint
from packlm.config.schema import CONFIG_DIR
from packlm.errors import ConfigError

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

EVERY_OPTION = dict(qk_norm=True, mlp="relu2", logit_softcap=15.0, residual_scalars=True,
                    zero_init_proj=True, tie_embeddings=True)  # fmt: skip


def run_export(*overrides: str) -> dict:
    from packlm.commands.export.__main__ import export

    with initialize_config_dir(CONFIG_DIR, version_base=None):
        return export(compose("export", overrides=list(overrides)))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_tokenizer):
    """(plain checkpoint, one with every option), the same tokenizer."""
    root = tmp_path_factory.mktemp("recipe-ckpts")
    plain, every = root / "plain.ckpt", root / "every.ckpt"
    write_checkpoint(plain, tiny_tokenizer)
    write_checkpoint(every, tiny_tokenizer, **EVERY_OPTION)
    return plain, every


def test_hf_names_every_option_llama_lacks_in_one_line(checkpoints, tmp_path):
    _, every = checkpoints
    out = tmp_path / "hf"
    with pytest.raises(ConfigError) as e:
        run_export("format=hf", f"ckpt_path={every}", f"out={out}")
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(
        "format=hf: the checkpoint's model.mlp=relu2, model.qk_norm=true, "
        "model.logit_softcap=15.0, model.residual_scalars=true has no LlamaForCausalLM"
    )
    assert "zero_init_proj" not in message and "tie_embeddings" not in message  # exportable
    assert not out.exists() or not any(out.iterdir())


def test_a_refused_hf_export_over_an_earlier_one_keeps_it(checkpoints, tmp_path):
    plain, every = checkpoints
    out = tmp_path / "hf"
    run_export("format=hf", f"ckpt_path={plain}", f"out={out}")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigError, match=r"^format=hf: the checkpoint's model\.mlp=relu2"):
        run_export("format=hf", f"ckpt_path={every}", f"out={out}", "overwrite=true")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing lost
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no temporary folder left


def test_zero_init_proj_with_a_tied_head_exports_to_hf(tmp_path, tiny_tokenizer):
    ckpt = tmp_path / "last.ckpt"
    write_checkpoint(ckpt, tiny_tokenizer, zero_init_proj=True, tie_embeddings=True)
    run_export("format=hf", f"ckpt_path={ckpt}", f"out={tmp_path / 'hf'}")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["tie_word_embeddings"] is True
    saved = json.loads((tmp_path / "hf" / "packlm_model.json").read_text())
    assert saved["zero_init_proj"] is True and saved["tie_embeddings"] is True


@pytest.mark.parametrize("fmt", ["nanogpt", "megatron", "tiktoken"])
def test_token_and_tokenizer_exports_ignore_the_model_options(
    checkpoints, tmp_path, tiny_corpus, fmt
):
    """docs/recipe.md: 'The nanoGPT and Megatron exports hold token data only and are
    unaffected' (tiktoken: the tokenizer only)."""
    data = [f"data.sources=[{tiny_corpus}/*.txt]", "data.val_fraction=0.2",
            f"cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    files = {}
    for name, ckpt in zip(("plain", "every"), checkpoints, strict=True):
        out = tmp_path / name
        summary = run_export(f"format={fmt}", f"ckpt_path={ckpt}", f"out={out}", *data)
        assert not any("model." in note for note in summary["notes"])
        files[name] = {p.name: read(p) for p in out.iterdir()}
    assert files["every"] == files["plain"] and len(files["plain"]) >= 2


def read(path):
    """A file's bytes; meta.pkl's content (pickle's memo may share equal strings or not)."""
    return pickle.loads(path.read_bytes()) if path.suffix == ".pkl" else path.read_bytes()


def test_a_checkpoint_from_before_the_options_exports_to_hf(tmp_path, tiny_tokenizer):
    """Its hparams lack the five keys: they read as off, and the export goes through."""
    ckpt = tmp_path / "old.ckpt"
    write_checkpoint(ckpt, tiny_tokenizer)
    saved = torch.load(ckpt, weights_only=False)
    for key in ("qk_norm", "mlp", "zero_init_proj", "logit_softcap", "residual_scalars"):
        del saved["hyper_parameters"]["model"][key]
    torch.save(saved, ckpt)
    summary = run_export("format=hf", f"ckpt_path={ckpt}", f"out={tmp_path / 'hf'}")
    assert "model.safetensors" in summary["files"]
    model = json.loads((tmp_path / "hf" / "packlm_model.json").read_text())
    assert (model["qk_norm"], model["mlp"], model["logit_softcap"]) == (False, "swiglu", None)
