"""train(cfg) end to end on a tiny corpus: tags in TensorBoard, checkpoints, resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.processes import run_tool_recording_imports
from packlm.callbacks.token_axis import BY_TOKENS
from packlm.config.schema import CONFIG_DIR, validate_config
from packlm.errors import ConfigError
from packlm.train import train

MODEL_TAGS = [
    "train/loss", "val/loss", "val/bpb", "val/ppl",
    "tokens/input", "tokens/nonpad", "tokens/supervised", "tokens/documents",
    "throughput/input_tokens_per_s", "throughput/nonpad_tokens_per_s",
    "throughput/supervised_tokens_per_s", "throughput/documents_per_s",
    "tokens_per_step/input", "tokens_per_step/supervised", "lr", "grad_norm",
]  # fmt: skip


def read_events(run_dir: Path, sub: str = "") -> EventAccumulator:
    acc = EventAccumulator(
        str(run_dir / "tb" / sub), size_guidance={"scalars": 0, "images": 0, "tensors": 0}
    )
    acc.Reload()
    return acc


def test_default_config_composes_and_every_group_option_validates():
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        validate_config(compose("config"))
        for experiment in sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml")):
            validate_config(compose("config", overrides=[f"experiment={experiment}"]))


def test_data_group_instantiates_with_target(compose_tiny):
    cfg = compose_tiny()
    datamodule = instantiate(cfg.data, tokenizer=cfg.tokenizer, cache_dir=cfg.cache_dir)
    assert datamodule.data.window == cfg.data.window


@pytest.mark.parametrize(
    "override, key",
    [
        ("data.window=0", "data.window"),
        ("data.stride=-1", "data.stride"),
        ("data.packing=zip", "data.packing"),
        ("data.window=64", "data.window"),  # longer than model.context_length=32
        ("model.n_head=3", "model.n_head"),
        ("tokenizer.vocab_size=10", "tokenizer.vocab_size"),
        ("trainer.precision=8-bit", "trainer.precision"),
        ("+trainer.limit_trian_batches=5", "trainer.limit_trian_batches"),  # unknown: not dropped
        ('tokenizer.pattern="("', "tokenizer.pattern"),
        ("trainer.max_steps=-1", "trainer.max_steps"),  # nothing would end the run
        ("train.progress_every_seconds=0", "train.progress_every_seconds"),
        ("train.progress_every_n_steps=0", "train.progress_every_n_steps"),
    ],
)
def test_bad_override_names_the_key(compose_tiny, override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(compose_tiny(override))


def test_train_writes_every_tag_checkpoints_and_resumes(compose_tiny, tmp_path):
    run = tmp_path / "run"
    metrics = train(compose_tiny(), run_dir=run)
    for key in ("val/loss", "val/bpb"):
        assert torch.isfinite(torch.tensor(metrics[key])), key

    events = read_events(run)
    scalars = set(events.Tags()["scalars"])
    missing = [t for t in MODEL_TAGS if t not in scalars]
    assert not missing, f"missing tags {missing}; have {sorted(scalars)}"
    assert any(t.startswith("data/") for t in scalars), "no data statistics scalars"
    assert "val_by_tokens/loss" in read_events(run, BY_TOKENS).Tags()["scalars"]  # own writer
    assert "Packing/attention_mask" in events.Tags()["images"]
    steps = [e.step for e in events.Scalars("train/loss")]
    assert max(steps) >= 5

    supervised = [e.value for e in events.Scalars("tokens/supervised")]
    assert supervised == sorted(supervised) and supervised[0] > 0  # cumulative

    last = run / "checkpoints" / "last.ckpt"
    assert last.is_file()
    # Resume for 4 more steps: the curve continues from step 6 in the same run directory.
    resumed = compose_tiny("trainer.max_steps=10", f"ckpt_path={last}")
    train(resumed, run_dir=tmp_path / "ignored")
    steps_after = sorted({e.step for e in read_events(run).Scalars("train/loss")})
    assert max(steps_after) >= 9
    assert min(s for s in steps_after if s > max(steps)) == max(steps) + 1
    supervised_after = [e.value for e in read_events(run).Scalars("tokens/supervised")]
    assert max(supervised_after) > max(supervised)


def test_the_last_logged_token_counts_are_the_summarys_totals(compose_tiny, tmp_path):
    """7 steps logged every 3: steps 7's counts still reach TensorBoard, so HParams' column
    and the terminal summary give the same supervised tokens."""
    run = tmp_path / "run"
    metrics = train(compose_tiny("trainer.max_steps=7", "trainer.log_every_n_steps=3"), run_dir=run)
    supervised = read_events(run).Scalars("tokens/supervised")
    assert supervised[-1].step == 6  # the 7th step
    assert supervised[-1].value == metrics["tokens/supervised"] > supervised[-2].value


def test_generate_samples_from_the_checkpoint_alone(compose_tiny, tmp_path):
    from packlm.commands.generate import generate

    run = tmp_path / "run"
    train(compose_tiny("trainer.max_steps=3"), run_dir=run)
    texts = generate(
        run / "checkpoints" / "last.ckpt", prompt="the", max_new_tokens=8, num_samples=2
    )
    assert len(texts) == 2 and all(t.startswith("the") for t in texts)
    # the command: the same samples, and only the bare model (no Lightning: ~4 s less start-up)
    args = [f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "prompt=the", "max_new_tokens=8",
            "num_samples=2", "temperature=0.8", "top_k=50", "seed=0"]  # fmt: skip
    out, imported = run_tool_recording_imports("packlm.generate", args, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert imported == ["torch"]
    assert out.stdout == "\n\n---\n\n".join(texts) + "\n"
