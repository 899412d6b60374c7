"""`python train.py ckpt_path=<ckpt>`, typed as the stop message prints it, resumes the run with
its own settings (the overrides Hydra saved in the run folder), the command line's on top."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.runs import checkpoint_step, reliability_overrides, run_train
from packlm.config.schema import CONFIG_DIR
from packlm.train import train
from packlm.train.resume_config import merged_overrides, resume_config


def test_overrides_merge_one_per_key_the_latest_winning():
    saved = [
        "experiment=tiny",
        "data.window=32",
        "+callbacks.x._target_=a.B",
        "trainer.max_steps=4",
    ]
    given = ["trainer.max_steps=8", "ckpt_path=c.ckpt", "callbacks.x._target_=a.C"]
    assert merged_overrides(saved, given) == [
        "experiment=tiny",
        "data.window=32",
        "+callbacks.x._target_=a.C",
        "trainer.max_steps=8",
        "ckpt_path=c.ckpt",
    ]


def test_a_resume_given_only_ckpt_path_takes_the_runs_own_settings(
    tiny_corpus, cache_dir, tmp_path
):
    run = tmp_path / "run"
    first = reliability_overrides(tiny_corpus, cache_dir, "trainer.max_steps=2")
    (run / ".hydra").mkdir(parents=True)  # what an accepted `python train.py <first>` keeps
    OmegaConf.save(OmegaConf.create(first), run / ".hydra" / "overrides.yaml")
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        OmegaConf.save(compose("config", overrides=first), run / ".hydra" / "config.yaml")
        train(compose("config", overrides=first), run_dir=run)
        last = run / "checkpoints" / "last.ckpt"
        given = [f"ckpt_path={last}", "trainer.max_steps=4"]
        cfg = resume_config(compose("config", overrides=given), given)
    assert cfg.model.n_embd == 32 and cfg.data.window == 32  # the run's, not the defaults
    assert cfg.trainer.max_steps == 4 and cfg.ckpt_path == str(last)  # the command line's
    train(cfg)  # before: refused, the model and data plan differed from the checkpoint's
    assert checkpoint_step(last) == 4


@pytest.mark.slow
def test_train_py_resumes_with_only_the_printed_ckpt_path(tiny_corpus, cache_dir, tmp_path):
    first = run_train([*reliability_overrides(tiny_corpus, cache_dir, "trainer.max_steps=2")],
                      cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    (last,) = tmp_path.glob("outputs/*/*/checkpoints/last.ckpt")
    resumed = run_train([f"ckpt_path={last}", "trainer.max_steps=3"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert checkpoint_step(last) == 3
