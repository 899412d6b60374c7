"""`python train.py` from s3:// (moto, through s3fs): a run and its resume, the resume reading
no object, `python -m packlm.trace` naming the object, and the secret key in no file."""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from helpers.object_store import SECRET  # noqa: E402
from helpers.runs import subprocess_env, tiny_overrides, train_command  # noqa: E402
from packlm.commands.trace import main as trace  # noqa: E402


def test_train_and_resume_from_s3_and_the_secret_is_in_no_file(s3, tmp_path, tiny_corpus, capsys):
    """`python train.py` from s3://, then a resume from its checkpoint: the resume lists the
    objects but reads none (the store is reused), and the secret access key is in no file of
    the runs or the cache (config dump, logs, checkpoints, TensorBoard) nor in the output."""
    s3.upload(tiny_corpus, "tiny")
    cache, run, resumed = tmp_path / "cache", tmp_path / "run", tmp_path / "resumed"
    args = [
        a if not a.startswith("data.sources=") else f"data.sources=[{s3.url}/tiny/*.txt]"
        for a in tiny_overrides(
            tiny_corpus, cache, steps=4, val_every=2, checkpoint_every=2, lean=True
        )
    ]
    env = subprocess_env(**s3.env)
    first = subprocess.run(train_command(*args, f"hydra.run.dir={run}"), env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(s3.proxy.gets("/tiny/doc")) >= 60, "every object was read"

    s3.proxy.requests.clear()
    again = [*args, "trainer.max_steps=6", f"ckpt_path={run}/checkpoints/last.ckpt"]
    second = subprocess.run(train_command(*again, f"hydra.run.dir={resumed}"), env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    assert s3.proxy.gets() == [], "the resume read objects it did not need"
    assert any("list-type" in r for r in s3.proxy.requests), "the resume did not list"
    assert (run / "checkpoints" / "last.ckpt").is_file()

    assert trace([str(run), "step=1"]) in (0, None)  # provenance: the object's URL, its record
    traced = capsys.readouterr().out
    assert f"{s3.url}/tiny/doc" in traced, traced

    files = [p for d in (run, resumed, cache) for p in d.rglob("*") if p.is_file()]
    assert any(p.name == "config.yaml" for p in files) and any("tfevents" in p.name for p in files)
    holding = [p for p in files if SECRET.encode() in p.read_bytes()]
    assert holding == []
    for out in (first.stdout, first.stderr, second.stdout, second.stderr):
        assert SECRET not in out
