"""Issue #59, family 7: a checkpoint packlm did not write, or cannot use, is refused in one
line naming what is missing, by every command that reads one (resume, init_from, generate,
evaluate, export, trace). Before: another project's Lightning checkpoint ended in a KeyError
traceback as `ckpt_path=` and a ValueError traceback as `init_from=`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.runs import subprocess_env
from packlm.checkpoint.load import load_checkpoint
from packlm.commands.trace.run import tracer_of
from packlm.errors import ConfigError
from packlm.train import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_corpus, cache_dir) -> Path:
    from hydra import compose, initialize_config_dir

    from helpers.runs import reliability_overrides
    from packlm.config.schema import CONFIG_DIR

    run = tmp_path_factory.mktemp("run")
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose(
            "config", overrides=reliability_overrides(tiny_corpus, cache_dir, "trainer.max_steps=2")
        )
    train(cfg, run_dir=run)
    return run / "checkpoints" / "last.ckpt"


def lightning_of_another_module(path: Path) -> Path:
    """What Lightning's Trainer.save_checkpoint writes for another LightningModule."""
    torch.save(
        {
            "epoch": 3,
            "global_step": 10,
            "pytorch-lightning_version": "2.4.0",
            "state_dict": {"net.0.weight": torch.zeros(4, 4), "net.0.bias": torch.zeros(4)},
            "hyper_parameters": {"lr": 0.1},
            "optimizer_states": [{"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}],
            "lr_schedulers": [],
            "callbacks": {},
            "loops": {},
        },
        path,
    )
    return path


def _edited(source: Path, dest: Path, edit) -> Path:
    ckpt = torch.load(source, weights_only=True)
    edit(ckpt)
    torch.save(ckpt, dest)
    return dest


def _other_shape(ckpt) -> None:
    ckpt["state_dict"]["model.wte.weight"] = torch.zeros(3, 3)


def _other_version(ckpt) -> None:
    ckpt["hyper_parameters"]["model"]["n_kv_groups"] = 2


def _renamed_weights(ckpt) -> None:
    ckpt["state_dict"] = {k.replace("model.", "model.trunk.", 1): v for k, v in ckpt["state_dict"].items()}  # fmt: skip


def _no_tokenizer(ckpt) -> None:
    del ckpt["packlm"]["tokenizer"]


def foreign(kind: str, tmp_path: Path, checkpoint: Path) -> tuple[Path, str]:
    """(a file of `kind`, the error it must give after `<key>=<path>: `)."""
    path = tmp_path / f"{kind}.ckpt"
    if kind == "lightning":
        lightning_of_another_module(path)
        return path, (r"not a packlm training checkpoint: no hyper_parameters\['model'\] .*, no "
                      r"'packlm' entry with the tokenizer; it is a Lightning 2\.4\.0 checkpoint of "
                      r"another module \(weights net\.0\.weight, net\.0\.bias\)")  # fmt: skip
    if kind == "plain_dict":
        torch.save({"weight": torch.zeros(2, 2), "bias": torch.zeros(2)}, path)
        return path, r"not a packlm training checkpoint: no state_dict .*a dict of 2 entries"
    if kind == "tensor":
        torch.save(torch.zeros(3), path)
        return path, r"not a packlm training checkpoint: the file holds a Tensor"
    if kind == "text":
        path.write_text("not a checkpoint at all\n")
        return path, r"not a checkpoint \(not a torch zip archive"
    if kind == "empty":
        path.write_bytes(b"")
        return path, r"an empty file, not a checkpoint"
    if kind == "directory":
        path.mkdir()
        return path, r"a directory, not a checkpoint"
    edits = {"other_shape": (_other_shape, r"its weights do not match the model config it "
                             r"records: model\.wte\.weight is \[3, 3\], the config builds \[300, 32\]"),
             "other_version": (_other_version, r"a checkpoint of another packlm version: its model "
                               r"config does not load here \(model\.n_kv_groups: unknown key"),
             "renamed_weights": (_renamed_weights, r"its weights do not match the model config it "
                                 r"records: no model\.blocks\.0\..*\(and \d+ more\)"),
             "no_tokenizer": (_no_tokenizer, r"not a packlm training checkpoint: no 'packlm' entry "
                              r"with the tokenizer; it is a packlm checkpoint of another version")}  # fmt: skip
    edit, message = edits[kind]
    return _edited(checkpoint, path, edit), message


KINDS = ["lightning", "plain_dict", "tensor", "text", "empty", "directory", "other_shape",
         "other_version", "renamed_weights", "no_tokenizer"]  # fmt: skip


def loaders(compose_tiny):
    """Each way a command reads a checkpoint, and the key its errors name."""
    return {
        "ckpt_path": (lambda p: train(compose_tiny(f"ckpt_path={p}")), "ckpt_path"),
        "init_from": (lambda p: train(compose_tiny(f"init_from={p}")), "init_from"),
        "load_checkpoint": (load_checkpoint, "ckpt_path"),  # generate, evaluate, export
        "trace": (tracer_of, "ckpt_path"),
    }


@pytest.mark.parametrize("loader", ["ckpt_path", "init_from", "load_checkpoint", "trace"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_foreign_checkpoint_is_refused_naming_what_is_missing(
    compose_tiny, checkpoint, cache_dir, tmp_path, loader, kind
):
    path, message = foreign(kind, tmp_path, checkpoint)
    load, key = loaders(compose_tiny)[loader]
    expected = rf"^{key}={path}: {message}"
    if (loader, kind) == ("trace", "directory"):  # trace takes a run's directory too
        expected = rf"^{path}: no \.hydra/config\.yaml \(not a run directory\)"
    before = sorted(str(p) for p in cache_dir.rglob("*"))
    with pytest.raises(ConfigError, match=expected):
        load(path)
    assert sorted(str(p) for p in cache_dir.rglob("*")) == before  # refused before any work


def test_the_packlm_checkpoint_itself_still_loads(checkpoint):
    assert load_checkpoint(checkpoint).weights


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        [str(ROOT / "train.py"), "ckpt_path={}"],
        [str(ROOT / "train.py"), "init_from={}"],
        ["-m", "packlm.generate", "ckpt_path={}", "max_new_tokens=2"],
        ["-m", "packlm.evaluate", "ckpt_path={}"],
        ["-m", "packlm.export", "ckpt_path={}", "format=hf", "out=exported"],
        ["-m", "packlm.trace", "{}", "step=0"],
    ],
    ids=["resume", "init_from", "generate", "evaluate", "export", "trace"],
)
def test_every_command_given_another_projects_lightning_checkpoint_says_so_in_one_line(
    tmp_path, command
):
    path = lightning_of_another_module(tmp_path / "theirs.ckpt")
    args = [sys.executable, *(a.format(path) for a in command)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300,
                         env=subprocess_env(), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and str(path) in errors[0], out.stderr[-2000:]
    assert "not a packlm training checkpoint: no hyper_parameters['model']" in errors[0]
    assert not (tmp_path / "exported").exists()
