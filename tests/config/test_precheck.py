"""A config mistake on any command line is packlm's one `error:` line, exit 2, naming the key
and the closest valid one, before torch or Lightning are imported (packlm.config.precheck).

The typo cases run in one fresh process (tests/helpers/typo_cases.py): each command as
`python train.py` / `python -m packlm.<tool>` runs it, its stderr captured, and whether torch
or Lightning were imported when it exited.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from packlm.config.precheck import precheck, validate_train

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "helpers" / "typo_cases.py"

# (command, arguments, what the line must hold); command "train" is train.py
TYPOS = [
    ("train", ["data.windw=64"], ["data.windw: unknown key", "did you mean data.window?"]),
    ("train", ["trainer.max_step=30"], ["trainer.max_step", "did you mean trainer.max_steps?"]),
    ("train", ["modle=medium"], ["modle: unknown key", "did you mean model?"]),
    ("train", ["model=mediun"], ["model=mediun: no such option", "did you mean model=medium?"]),
    ("train", ["experiment=tny"], ["experiment=tny", "did you mean experiment=tiny?"]),
    ("train", ["data.window=abc"], ["data.window=abc: must be an integer"]),
    ("train", ["trainer.enable_progress_bar=maybe"], ["enable_progress_bar=maybe", "true or"]),
    ("train", ["data.window=-3"], ["data.window=-3: must be a positive integer"]),
    ("train", ["data.packing=zip"], ["data.packing='zip'"]),
    ("train", ["+data.windw=64"], ["data.windw: unknown key", "did you mean window?"]),
    ("train", ["+data.window=64"], ["+data.window: data.window is in the config already"]),
    ("train", ["~data.windw"], ["~data.windw: no such key"]),
    ("train", ["data.window=64,128"], ["data.window=64,128", "add -m"]),
    ("train", ["-m", "data.window=64,abc"], ["data.window=abc: must be an integer"]),
    ("train", ["-m", "data.packing=none,zip"], ["data.packing='zip'"]),
    ("train", ["data.window=[1"], ["data.window=[1: cannot read this override"]),
    ("train", ["--cfg", "job", "model.n_head=3"], ["model."]),
    ("packlm.stats", ["data.windw=64"], ["data.windw: unknown key", "did you mean data.window?"]),
    ("packlm.stats", ["+epochs=two"], ["+epochs='two'"]),
    ("packlm.stats", ["+epochs=-1"], ["+epochs=-1"]),
    ("packlm.stats", ["+epochs=1000000000000"], ["+epochs=1000000000000"]),
    ("packlm.prepare", ["tokenizer.vocab_sise=300"], ["did you mean tokenizer.vocab_size?"]),
    ("packlm.prepare", ["data.window=abc"], ["data.window=abc: must be an integer"]),
    ("packlm.evaluate", ["ckpt_path=x", "devce=cpu"], ["devce: unknown key", "device?"]),
    ("packlm.evaluate", ["ckpt_path=x", "data.batch_size=abc"], ["data.batch_size='abc'"]),
    ("packlm.evaluate", ["ckpt_path=x", "per_document=maybe"], ["per_document='maybe'"]),
    ("packlm.generate", ["ckpt_path=x", "max_new_token=5"], ["did you mean max_new_tokens?"]),
    ("packlm.generate", ["ckpt_path=x", "top_k=-1"], ["top_k=-1"]),
    ("packlm.generate", ["ckpt_path=x", "temperature=hot"], ["temperature='hot'"]),
    ("packlm.export", ["formt=hf"], ["formt: unknown key", "did you mean format?"]),
    ("packlm.export", ["format=hf", "data.window=abc"], ["data.window=abc: must be an integer"]),
    ("packlm.trace", ["R", "step=five"], ["step='five': must be an integer"]),
    ("packlm.trace", ["R", "step=-1"], ["step=-1: must be >= 0"]),
    ("packlm.trace", ["R", "stpe=3"], ["stpe: unknown argument", "did you mean step?"]),
    ("packlm.trace", ["R", "step=1", "world=0"], ["world=0: must be >= 1"]),
    ("packlm.trace", ["R", "step=1", "json=maybe"], ["json='maybe'"]),
    ("packlm.cache", ["prune", "--max-gb", "abc"], ["--max-gb", "'abc'"]),
    ("packlm.cache", ["prune", "--unused-days", "nan"], ["--unused-days nan"]),
    ("packlm.cache", ["prune", "--max-gb", "-1"], ["--max-gb -1.0"]),
    ("packlm.compare", ["--outt", "x.png", "."], ["--outt"]),
]


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> list[dict]:
    """Every case of TYPOS run in one fresh process, from an empty folder."""
    cwd = tmp_path_factory.mktemp("typos")
    cases = [[command, args] for command, args, _ in TYPOS]
    done = subprocess.run(
        [sys.executable, str(CASES), json.dumps(cases)],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(cwd.iterdir()) == [], "a refused command wrote something"
    return json.loads(done.stdout)


@pytest.mark.parametrize("index", range(len(TYPOS)), ids=[" ".join(t[1]) for t in TYPOS])
def test_a_mistake_is_one_line_naming_the_key_before_torch(answers, index):
    command, args, wanted = TYPOS[index]
    answer = answers[index]
    lines = answer["stderr"].splitlines()
    assert answer["code"] == 2, answer
    assert len(lines) == 1 and lines[0].startswith("error: "), answer["stderr"]
    for words in wanted:
        assert words in lines[0], lines[0]
    assert "To append to your config" not in lines[0] and "+data.windw" not in lines[0]
    assert len(lines[0]) < 500
    assert not answer["torch"] and not answer["lightning"], f"{command} imported torch"


def test_train_py_answers_a_typo_on_one_line(tmp_path):
    """The command as a user types it: stderr is the one line, nothing else, exit 2."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "data.windw=64"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == "error: data.windw: unknown key (did you mean data.window?)\n"
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def check(*argv: str) -> None:
    precheck("config", validate_train, list(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["experiment=tiny", "data.window=64"],
        ["-m", "data.window=32,64", "data.stride=range(8,33,8)"],
        ["-m", "model=small,medium", "hydra.sweep.dir=/tmp/x"],
        ["hydra.run.dir=/tmp/x", "hydra.job.chdir=false", "++seed=3"],
        ["-m", "data.window=32,64", "optim.lr=interval(0.0001,0.01)"],
        ["ckpt_path=/nonexistent/last.ckpt", "data.window=64"],
        ["--cfg", "job", "trainer.max_time=00:00:01:00"],
        ["--hydra-help"],
        ["--info"],
    ],
)
def test_what_hydra_accepts_and_packlm_validates_passes(argv):
    """Sweeps (lists, ranges, an optuna interval), Hydra's own keys, `++`, an experiment
    and a resume (validated by the job, from the run's own overrides) all pass the check."""
    check(*argv)


def test_a_resume_is_still_checked_for_keys_and_types(capsys):
    with pytest.raises(SystemExit) as exited:
        check("ckpt_path=/nonexistent/last.ckpt", "data.windw=64")
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("error: data.windw: unknown key")


def test_a_sweep_is_checked_value_by_value_in_every_swept_key(capsys):
    with pytest.raises(SystemExit):
        check("-m", "data.window=32,64", "data.stride=8,16,-4")
    assert capsys.readouterr().err.startswith("error: data.stride=-4")


def test_a_config_dir_of_the_user_is_searched(tmp_path, capsys):
    """--config-dir adds the user's presets, as Hydra does: one of them composes, and a
    typo in it is named."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\ndata:\n  window: 64\n  stride: 32\n"
    )
    (tmp_path / "experiment" / "typo.yaml").write_text("# @package _global_\ndata:\n  windw: 3\n")
    (tmp_path / "experiment" / "bad.yaml").write_text("data: [a: b\n")
    check("--config-dir", str(tmp_path), "experiment=mine")
    for name, line in (
        (
            "typo",
            "error: experiment/typo.yaml: data.windw: unknown key (did you mean data.window?)",
        ),
        ("bad", f"error: {tmp_path}/experiment/bad.yaml, line 2: not valid YAML"),
    ):
        with pytest.raises(SystemExit) as exited:
            check("--config-dir", str(tmp_path), f"experiment={name}")
        assert exited.value.code == 2
        assert capsys.readouterr().err.startswith(line)
