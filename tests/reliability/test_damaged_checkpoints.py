"""A damaged checkpoint is refused by every command that loads one (issue #47): one flipped
bit (a zip entry that no longer matches its CRC32) is named by file and entry; non-finite
weights by the tensor's name. Before, both loaded silently (the loss came out different;
evaluate printed `"loss": NaN` and exited 0)."""

from __future__ import annotations

import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from helpers.runs import subprocess_env
from packlm.checkpoint.contents import read_checkpoint
from packlm.checkpoint.load import load_checkpoint
from packlm.commands.trace.run import tracer_of
from packlm.errors import ConfigError
from packlm.train import train


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


def flip_a_bit(source: Path, dest: Path) -> str:
    """A copy of `source` with one bit flipped in the middle of its largest entry (a tensor),
    so the zip directory and every header stay valid: the entry's name."""
    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:
        info = max(archive.infolist(), key=lambda i: i.compress_size)
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.compress_size // 2] ^= 0x10
    dest.write_bytes(bytes(data))
    return info.filename


def with_a_nan(source: Path, dest: Path) -> str:
    """A copy of `source` (a valid archive) whose first weight matrix holds one NaN."""
    ckpt = torch.load(source, weights_only=True)
    name = next(k for k, v in ckpt["state_dict"].items() if v.ndim == 2)
    ckpt["state_dict"][name] = ckpt["state_dict"][name].clone()
    ckpt["state_dict"][name][0, 0] = float("nan")
    torch.save(ckpt, dest)
    return name


def loaders(compose_tiny):
    """Each way a command loads a checkpoint: resume, init_from, evaluate/generate/export
    (load_checkpoint), trace (tracer_of)."""
    return {
        "ckpt_path": lambda p: train(compose_tiny(f"ckpt_path={p}")),
        "init_from": lambda p: train(compose_tiny(f"init_from={p}")),
        "load_checkpoint": load_checkpoint,
        "trace": tracer_of,
    }


@pytest.mark.parametrize("loader", ["ckpt_path", "init_from", "load_checkpoint", "trace"])
def test_a_flipped_bit_is_refused_naming_the_file_and_the_entry(
    compose_tiny, checkpoint, tmp_path, loader
):
    damaged = tmp_path / "flipped.ckpt"
    entry = flip_a_bit(checkpoint, damaged)
    assert torch.load(damaged, weights_only=True)  # torch itself reads it without a word
    with pytest.raises(ConfigError, match=r"flipped\.ckpt: damaged checkpoint: zip entry") as e:
        loaders(compose_tiny)[loader](damaged)
    assert repr(entry) in str(e.value)


@pytest.mark.parametrize("loader", ["ckpt_path", "init_from", "load_checkpoint", "trace"])
def test_non_finite_weights_are_refused_naming_the_tensor(
    compose_tiny, checkpoint, tmp_path, loader
):
    damaged = tmp_path / "nan.ckpt"
    name = with_a_nan(checkpoint, damaged)
    with pytest.raises(ConfigError, match=rf"nan\.ckpt: the weight {name} holds NaN values"):
        loaders(compose_tiny)[loader](damaged)


def test_the_intact_checkpoint_still_loads(checkpoint):
    assert read_checkpoint(checkpoint)["state_dict"]


def test_generate_from_a_damaged_checkpoint_is_one_error_line(checkpoint, tmp_path):
    damaged = tmp_path / "flipped.ckpt"
    entry = flip_a_bit(checkpoint, damaged)
    out = subprocess.run(
        [sys.executable, "-m", "packlm.generate", f"ckpt_path={damaged}", "max_new_tokens=2"],
        capture_output=True, text=True, timeout=300, env=subprocess_env(), cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and repr(entry) in errors[0] and str(damaged) in errors[0]
