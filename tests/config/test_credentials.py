"""A credential never reaches disk or output (packlm.config.credentials, packlm.config.precheck).

A URL holding one, wherever a user can write it (an override, a preset in --config-dir, an
environment variable a config interpolates, tokenizer.path), is refused in one line that
masks it, before Hydra writes the run folder; secrets given the right way (environment,
profile file) are in no byte a run, its cache, its checkpoints and an export write.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.runs import run_train, tiny_overrides
from packlm.config.credentials import check_config, masked_url
from packlm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sEcReT9f3a7c2b1d"


@pytest.mark.parametrize(
    "url, masked",
    [
        (f"https://{SECRET}@host/a.txt", "https://***@host/a.txt"),
        (f"s3://AKIAKEY:{SECRET}@bucket/a.txt", "s3://***@bucket/a.txt"),
        (f"s3://AKIAKEY:ab/{SECRET}@bucket/a.txt", "s3://***@bucket/a.txt"),  # '/' in a key
        (f"https://h/a.txt?auth={SECRET}&page=2", "https://h/a.txt?auth=***&page=2"),
        (f"https://h/a?X-Amz-Credential=AK&X-Amz-Signature={SECRET}", None),
        (f"https://acct.blob.core.windows.net/c/x.txt?sv=1&sig={SECRET}", None),
        (f"https://h/a?access_token={SECRET}", "https://h/a?access_token=***"),
        (f"https://h/a?accessToken={SECRET}", "https://h/a?accessToken=***"),
        (f"https://h/a?api-key={SECRET}", "https://h/a?api-key=***"),
        (f"https://h/a?password={SECRET}", "https://h/a?password=***"),
        (f"hf://datasets/o/n/a.txt?token={SECRET}", "hf://datasets/o/n/a.txt?token=***"),
    ],
)
def test_a_url_with_a_credential_is_named_masked(url, masked):
    shown = masked_url(url)
    assert shown is not None and SECRET not in shown and "***" in shown
    if masked is not None:
        assert shown == masked


@pytest.mark.parametrize(
    "url",
    [
        "https://host/a.txt",
        "https://host:8080/data/a@b.txt",  # a port, and '@' in the path
        "hf://datasets/org/name@main/a.txt",  # a revision
        "s3://bucket/shards/*.jsonl?versionId=3",
        "https://h/a.txt?page=2&design=1",
        "data/local.txt",
    ],
)
def test_a_url_without_one_passes(url):
    assert masked_url(url) is None
    check_config({"data": {"sources": [url]}})


@given(
    name=st.sampled_from(["token", "auth", "key", "sig", "signature", "password", "secret",
                          "X-Amz-Security-Token", "client_secret", "apiKey", "session_id"]),
    secret=st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=8, max_size=40),
    where=st.sampled_from(["sources", "val_sources", "tokenizer"]),
)  # fmt: skip
def test_a_secret_parameter_anywhere_in_a_config_is_refused_masked(name, secret, where):
    secret = f"QX9{secret}"  # not a word of the message itself
    url = f"https://host/x.txt?a=1&{name}={secret}"
    values = {"tokenizer": {"path": url}} if where == "tokenizer" else {"data": {where: [url]}}
    with pytest.raises(ConfigError) as refused:
        check_config(values)
    assert secret not in str(refused.value) and "***" in str(refused.value)
    assert str(refused.value).startswith(("data.", "tokenizer.path"))


REFUSED = [  # (arguments, environment): each plants SECRET in a URL
    ([f"data.sources=[https://{SECRET}@host/a.txt]"], {}),
    ([f"data.sources=[s3://AKIAKEY:{SECRET}@bucket/a.txt]"], {}),
    ([f"data.val_sources=[https://host/a.txt?auth={SECRET}]"], {}),
    ([f"tokenizer.path=https://host/tok?X-Amz-Signature={SECRET}"], {}),
    (["data.sources=[${oc.env:LEAKY_URL}]"], {"LEAKY_URL": f"https://u:{SECRET}@host/a.txt"}),
    (["--config-dir", "{presets}", "experiment=leaky"], {}),
    (["-m", f"data.sources=[a.txt],[https://{SECRET}@host/b.txt]"], {}),
]


@pytest.mark.parametrize("index", range(len(REFUSED)))
def test_a_url_credential_is_refused_before_hydra_writes(tmp_path, index):
    """Refused in one line (exit 2) that does not hold the secret, and the run folder, the
    sweep folder and the working directory hold nothing: Hydra never started the job."""
    args, env = REFUSED[index]
    presets = tmp_path / "presets"
    (presets / "experiment").mkdir(parents=True)
    (presets / "experiment" / "leaky.yaml").write_text(
        f"# @package _global_\ndata:\n  sources: ['https://host/a.txt?token={SECRET}']\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    args = [a.replace("{presets}", str(presets)) for a in args]
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args, f"hydra.run.dir={work}/run",
         f"hydra.sweep.dir={work}/sweep"],
        cwd=work, capture_output=True, text=True, timeout=300, env={**_env(), **env},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    assert "holds a credential" in done.stderr and "***" in done.stderr
    assert SECRET not in done.stderr + done.stdout
    assert list(work.iterdir()) == []


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}


@pytest.mark.slow
def test_secrets_in_the_environment_and_a_profile_file_reach_no_byte_a_run_writes(
    tmp_path, tiny_corpus
):
    """A short real run (local data, a checkpoint, TensorBoard, the final validation) and an
    export, with secrets where a user keeps them: AWS_SECRET_ACCESS_KEY, HF_TOKEN, an AWS
    profile file. Not one byte of the run folder (.hydra, job log, checkpoints, events), the
    cache, the export or the output holds any of them."""
    secrets = {
        "AWS_SECRET_ACCESS_KEY": f"aws{SECRET}",
        "HF_TOKEN": f"hf_{SECRET}",
        "AWS_SESSION_TOKEN": f"sess{SECRET}",
        "WANDB_API_KEY": f"wandb{SECRET}",
    }
    profile = tmp_path / "aws-credentials"
    profile.write_text(
        f"[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = prof{SECRET}\n"
    )
    env = {**secrets, "AWS_SHARED_CREDENTIALS_FILE": str(profile), "AWS_PROFILE": "default"}
    cache, run, export = tmp_path / "cache", tmp_path / "run", tmp_path / "export"
    args = tiny_overrides(tiny_corpus, cache, steps=4, val_every=2, checkpoint_every=2)
    trained = run_train([*args, f"hydra.run.dir={run}"], cwd=tmp_path, **env)
    assert trained.returncode == 0, trained.stderr[-3000:]
    exported = subprocess.run(
        [sys.executable, "-m", "packlm.export", "format=nanogpt", f"out={export}",
         *[a for a in args if a.startswith(("data.", "tokenizer.", "cache_dir"))]],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**_env(), **env},
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-3000:]

    files = [p for d in (run, cache, export) for p in d.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"config.yaml", "overrides.yaml", "hydra.yaml", "last.ckpt"} <= names
    assert any("tfevents" in n for n in names) and any(n.endswith(".log") for n in names)
    planted = [SECRET, *secrets.values(), f"prof{SECRET}"]
    holding = [str(p) for p in files if any(s.encode() in p.read_bytes() for s in planted)]
    assert holding == []
    for out in (trained.stdout, trained.stderr, exported.stdout, exported.stderr):
        assert SECRET not in out
    assert json.loads(exported.stdout)  # the export did write its summary
