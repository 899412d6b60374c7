"""model.compile=auto: the rule (packlm.config.compile_choice) with its inputs faked, the
compiled views' fallback when compiling fails (LitCausalLM.use_compiled_views), and what a
run says, keeps and resumes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from helpers.logs import logged
from helpers.models import cat_rows, pack_row, random_docs, tiny_config
from helpers.runs import ROOT, run_train, subprocess_env, tiny_overrides, train_command
from packlm.config import compile_choice
from packlm.config.compile_choice import auto_compile
from packlm.config.model import ModelConfig
from packlm.config.schema import CONFIG_DIR
from packlm.errors import ConfigError
from packlm.model import fused
from packlm.model.lit_module import LitCausalLM
from packlm.train import train

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated"),
    pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`"),
]

T = 16
BATCH = cat_rows(pack_row(random_docs([7, 8], 1), T), pack_row(random_docs([15], 2), T))


@pytest.fixture
def machine(monkeypatch):
    """The rule's inputs, faked: an AVX512 CPU where AVX512 pays, MIN_STEPS 100, MIN_MINUTES
    5, no CUDA, a compiler probe that works and records its calls."""
    probes = []
    monkeypatch.setattr(compile_choice, "CPU_KINDS_THAT_PAY", frozenset({"AVX512"}))
    monkeypatch.setattr(compile_choice, "MIN_STEPS", 100)
    monkeypatch.setattr(compile_choice, "MIN_MINUTES", 5.0)
    monkeypatch.setattr(compile_choice, "cpu_kind", lambda: "AVX512")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)

    def probe():
        probes.append(1)
        return True, "0.1 s probe"

    monkeypatch.setattr(compile_choice, "compiler_works", probe)
    return probes


# --- the rule -----------------------------------------------------------------------------


def test_cuda_compiles_whatever_the_run(machine, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert auto_compile("auto", 5, None) == (True, "CUDA")
    assert auto_compile("gpu", None, 0.5) == (True, "CUDA")
    # a CPU run on a machine with a GPU takes the CPU's rule
    assert auto_compile("cpu", 5, None) == (
        False,
        f"5 steps: too short to repay the ~{compile_choice.COMPILE_SECONDS} s compile",
    )
    assert machine == []


def test_a_cpu_whose_isa_does_not_pay_stays_eager_without_probing(machine, monkeypatch):
    for isa in ("AVX2", "DEFAULT", "NO AVX", "SVE256", ""):
        monkeypatch.setattr(compile_choice, "cpu_kind", lambda isa=isa: isa)
        on, why = auto_compile("cpu", 10**6, None)
        assert (on, why) == (
            False,
            f"CPU {isa}: compiled steps not measured faster on it, see docs/training.md",
        )
    assert machine == []  # no probe: it costs seconds


@pytest.mark.parametrize(
    ("steps", "minutes", "length"),
    [(99, None, "99 steps"), (0, None, "0 steps"), (None, 4.5, "4.5 min"),
     (10**9, 0.5, "1000000000 steps in 0.5 min"), (99, 60.0, "99 steps in 60 min")],
)  # fmt: skip
def test_a_short_cpu_run_stays_eager_without_probing(machine, steps, minutes, length):
    assert auto_compile("cpu", steps, minutes) == (
        False,
        f"{length}: too short to repay the ~{compile_choice.COMPILE_SECONDS} s compile",
    )
    assert machine == []


@pytest.mark.parametrize(
    ("steps", "minutes", "length"),
    [(100, None, "100 steps"), (5000, None, "5000 steps"), (None, 5.0, "5 min"),
     (None, None, "no step or time limit"), (100, 5.0, "100 steps in 5 min")],
)  # fmt: skip
def test_a_long_run_on_a_cpu_that_pays_compiles_after_one_probe(machine, steps, minutes, length):
    on, why = auto_compile("auto", steps, minutes)
    assert (on, why) == (True, f"CPU AVX512, {length}, C++ compiler works (0.1 s probe)")
    assert machine == [1]


def test_no_working_compiler_keeps_a_long_run_eager(machine, monkeypatch):
    monkeypatch.setattr(
        compile_choice, "compiler_works", lambda: (False, "InvalidCxxCompiler: no g++")
    )
    assert auto_compile("cpu", 5000, None) == (
        False,
        "CPU AVX512, 5000 steps, but no working C++ compiler: InvalidCxxCompiler: no g++",
    )


def test_anomaly_detection_and_other_accelerators_stay_eager(machine, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    on, why = auto_compile("auto", 5000, None, detect_anomaly=True)
    assert not on and why.startswith("trainer.detect_anomaly")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert auto_compile("auto", 5000, None) == (False, "mps: compiled steps not measured there")
    assert auto_compile("tpu", 5000, None) == (False, "tpu: compiled steps not measured there")
    assert machine == []


@pytest.mark.parametrize(
    ("isa", "flags", "kind"),
    [("AVX512", "fpu avx512f amx_tile amx_bf16", "AVX512+AMX"), ("AVX512", "fpu avx512f", "AVX512"),
     ("AVX2", "fpu amx_tile", "AVX2"), ("AVX512", None, "AVX512"), ("AVX512", "dir", "AVX512"),
     ("AVX512", "binary", "AVX512")],
)  # fmt: skip
def test_cpu_kind_names_amx_from_the_cpu_flags(tmp_path, monkeypatch, isa, flags, kind):
    """AMX from /proc/cpuinfo's flags lines only; a missing, unreadable or foreign file: none."""
    info = tmp_path / "cpuinfo"
    if flags == "dir":
        info.mkdir()
    elif flags == "binary":  # a foreign file: bytes, "amx_tile" outside a flags line
        info.write_bytes(b"\xff\xfe amx_tile\x00\nmodel name: amx_tile\n")
    elif flags is not None:
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    monkeypatch.setattr(compile_choice, "CPUINFO", info)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: isa)
    assert compile_choice.cpu_kind() == kind


def test_the_probe_reports_a_failure_in_one_line(monkeypatch):
    compile_choice.compiler_works.cache_clear()

    def broken(fn):
        def run(*args):
            raise RuntimeError("InvalidCxxCompiler: no g++\n" + "inductor's page\n" * 50)

        return run

    monkeypatch.setattr(torch, "compile", broken)
    try:
        assert compile_choice.compiler_works() == (
            False,
            "RuntimeError: InvalidCxxCompiler: no g++",
        )
        monkeypatch.setattr(torch, "compile", lambda fn: lambda x: fn(x) + 1)  # a wrong kernel
        compile_choice.compiler_works.cache_clear()
        assert compile_choice.compiler_works() == (
            False,
            "the compiled probe computed another result",
        )
    finally:
        compile_choice.compiler_works.cache_clear()  # the real probe for later tests


@pytest.mark.parametrize("value", ["yes", "AUTO", "on", 1, 0, None, 1.0, "", ["auto"]])
def test_model_compile_takes_true_false_or_auto_only(value):
    with pytest.raises(ConfigError, match=r"^model\.compile=.*: true, false or auto$"):
        ModelConfig(compile=value).validate()
    for good in (True, False, "auto"):
        ModelConfig(compile=good).validate()


@pytest.mark.slow
def test_a_bad_model_compile_on_the_command_line_is_one_line_before_any_work(tiny_corpus, tmp_path):
    args = tiny_overrides(tiny_corpus, tmp_path / "cache", steps=2, val_every=2)
    bad = run_train([*args, "model.compile=yes"], cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert bad.stderr.strip().splitlines()[-1] == "error: model.compile='yes': true, false or auto"
    assert not (tmp_path / "cache").exists()  # nothing tokenized, nothing cached


# --- the compiled views and their fallback ------------------------------------------------


def failing_compile(calls: list):
    """A torch.compile whose compiled callables raise on their every call (counted)."""

    def compile_(fn):
        def run(*args):
            calls.append(fn)
            raise RuntimeError("InvalidCxxCompiler: no working C++ compiler\nthe rest")

        return run

    return compile_


def loss_and_grads(lit: LitCausalLM, batch=BATCH):
    loss = lit._sum_ce(batch)[0]
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in lit.named_parameters()}


def fresh(compile_value="auto") -> LitCausalLM:
    torch.manual_seed(0)
    return LitCausalLM(tiny_config(context_length=T, compile=compile_value), {})


def test_auto_builds_eager_views_and_keeps_auto_in_the_hparams(monkeypatch):
    monkeypatch.setattr(torch, "compile", failing_compile([]))
    lit = fresh("auto")  # evaluate, generate, export: "auto" is eager, and compiles nothing
    assert not lit.runs_compiled and lit._run_model is lit.model
    lit.use_compiled_views(True, fallback=True)
    assert lit.hparams["model"]["compile"] == "auto"


def test_compiled_views_leave_the_checkpointed_state_as_it_is():
    eager, compiled = fresh("auto"), fresh(True)  # the real torch.compile: lazy, no compile yet
    assert compiled.runs_compiled
    assert list(compiled.state_dict()) == list(eager.state_dict())
    for key, value in eager.state_dict().items():
        assert torch.equal(compiled.state_dict()[key], value), key


@pytest.mark.parametrize("chunked", [False, True])
def test_a_failed_first_compiled_call_under_auto_warns_once_and_steps_as_eager(
    monkeypatch, chunked
):
    if chunked:  # the trunk's view (_run_hidden) is the one called
        monkeypatch.setattr(fused, "CE_CHUNKED_FROM", 0)
    want, want_grads = loss_and_grads(fresh())
    calls = []
    monkeypatch.setattr(torch, "compile", failing_compile(calls))
    lit = fresh()
    lit.use_compiled_views(True, fallback=True)
    with logged("packlm.model.compiled_views") as records:
        got, got_grads = loss_and_grads(lit)
        lit.zero_grad()
        again, _ = loss_and_grads(lit)  # eager from now on: no second try, no second line
    assert torch.equal(got, want) and torch.equal(again, want)
    for name, grad in want_grads.items():
        assert torch.equal(got_grads[name], grad), name
    assert len(calls) == 1
    assert [r.levelno for r in records] == [logging.WARNING]
    line = records[0].getMessage()
    assert "\n" not in line and "model.compile=false" in line
    assert "(RuntimeError: InvalidCxxCompiler: no working C++ compiler)" in line
    assert not lit.runs_compiled  # both views back to the module itself
    assert lit._run_model is lit.model and lit._run_hidden == lit.model.hidden


def test_a_failed_compile_under_explicit_true_is_one_config_error(monkeypatch):
    monkeypatch.setattr(torch, "compile", failing_compile([]))
    lit = fresh(True)
    with pytest.raises(ConfigError, match=r"^model\.compile=true: torch\.compile failed") as e:
        lit._sum_ce(BATCH)
    assert "\n" not in str(e.value) and "RuntimeError: InvalidCxxCompiler" in str(e.value)


def test_a_model_error_is_raised_as_it_is_not_blamed_on_the_compile(monkeypatch):
    monkeypatch.setattr(torch, "compile", failing_compile([]))
    bad = dict(BATCH, input_ids=BATCH["input_ids"] + 10**6)  # ids past the embedding
    for compile_value, fallback in ((True, False), ("auto", True)):
        lit = fresh(compile_value)
        lit.use_compiled_views(True, fallback=fallback)
        with logged("packlm.model.compiled_views") as records, pytest.raises(IndexError):
            lit._sum_ce(bad)
        assert records == [] and lit.runs_compiled


def test_the_guard_stays_until_a_training_call_has_worked(monkeypatch):
    compiled = []

    def working_compile(fn):
        def run(*args):
            compiled.append(torch.is_grad_enabled())
            return fn(*args)

        return run

    monkeypatch.setattr(torch, "compile", working_compile)
    lit = fresh(True)
    guard = lit._run_model
    with torch.no_grad():  # validation first: its graph says nothing of the training one
        lit._sum_ce(BATCH)
    assert lit._run_model is guard
    lit._sum_ce(BATCH)
    assert lit._run_model is not guard and lit.runs_compiled
    lit._sum_ce(BATCH)  # the compiled view itself now
    assert compiled == [False, True, True]


# --- a run --------------------------------------------------------------------------------


def compose_run(corpus: Path, cache: Path, *extra: str):
    overrides = tiny_overrides(corpus, cache, *extra, steps=4, val_every=2, lean=True)
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        return compose("config", overrides=overrides)


@pytest.fixture
def compiles_here(monkeypatch):
    """auto says on for the tiny run (a CPU that pays, no minimum length, a working probe)."""
    monkeypatch.setattr(compile_choice, "CPU_KINDS_THAT_PAY", frozenset({"AVX512"}))
    monkeypatch.setattr(compile_choice, "cpu_kind", lambda: "AVX512")
    monkeypatch.setattr(compile_choice, "MIN_STEPS", 1)
    monkeypatch.setattr(compile_choice, "compiler_works", lambda: (True, "0.1 s probe"))


def test_a_run_whose_compile_fails_under_auto_trains_as_the_eager_run(
    tiny_corpus, tmp_path, monkeypatch, compiles_here
):
    cache = tmp_path / "cache"
    eager = train(compose_run(tiny_corpus, cache, "model.compile=false"), run_dir=tmp_path / "e")
    calls = []
    monkeypatch.setattr(torch, "compile", failing_compile(calls))
    with logged("packlm.train.compose") as said, logged("packlm.model.compiled_views") as warned:
        fell = train(compose_run(tiny_corpus, cache), run_dir=tmp_path / "f")
    assert fell == eager  # every metric, to the bit
    lines = [r.getMessage() for r in said if "model.compile" in r.getMessage()]
    assert lines == [
        "model.compile=auto: on (CPU AVX512, 4 steps, C++ compiler works (0.1 s probe))"
    ]
    assert len(warned) == 1 and len(calls) == 1
    e, f = (
        torch.load(tmp_path / d / "checkpoints" / "last.ckpt", weights_only=False) for d in "ef"
    )
    assert f["hyper_parameters"]["model"]["compile"] == "auto"
    assert list(f["state_dict"]) == list(e["state_dict"])
    for key, value in e["state_dict"].items():
        assert torch.equal(f["state_dict"][key], value), key


def test_a_run_whose_compile_fails_under_true_stops_with_one_line(
    tiny_corpus, tmp_path, monkeypatch
):
    monkeypatch.setattr(torch, "compile", failing_compile([]))
    cfg = compose_run(tiny_corpus, tmp_path / "cache", "model.compile=true")
    with pytest.raises(ConfigError, match=r"^model\.compile=true: torch\.compile failed"):
        train(cfg, run_dir=tmp_path / "run")


def test_a_resume_decides_again_on_the_steps_left(tiny_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(compile_choice, "CPU_KINDS_THAT_PAY", frozenset({"AVX512"}))
    monkeypatch.setattr(compile_choice, "cpu_kind", lambda: "AVX512")
    monkeypatch.setattr(compile_choice, "MIN_STEPS", 3)
    monkeypatch.setattr(torch, "compile", failing_compile([]))  # nothing may compile here
    cache, run = tmp_path / "cache", tmp_path / "run"
    train(compose_run(tiny_corpus, cache, "model.compile=false"), run_dir=run)
    ckpt = run / "checkpoints" / "last.ckpt"
    with logged("packlm.train.compose") as said:  # compile changed: the resume is not refused
        train(compose_run(tiny_corpus, cache, f"ckpt_path={ckpt}", "trainer.max_steps=6"))
    lines = [r.getMessage() for r in said if "model.compile" in r.getMessage()]
    assert lines == [
        f"model.compile=auto: off (2 steps: too short to repay the "
        f"~{compile_choice.COMPILE_SECONDS} s compile)"
    ]
    resumed = torch.load(ckpt, weights_only=False)
    assert resumed["global_step"] == 6 and resumed["hyper_parameters"]["model"]["compile"] == "auto"


@pytest.mark.slow
def test_train_py_says_what_auto_chose_in_one_line(tiny_corpus, tmp_path):
    args = tiny_overrides(tiny_corpus, tmp_path / "cache", steps=2, val_every=2, lean=True)
    result = subprocess.run(
        train_command(*args, f"hydra.run.dir={tmp_path / 'run'}"),
        cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if "model.compile" in line]
    assert len(lines) == 1, lines
    assert "model.compile=auto: off (" in lines[0]  # 2 steps: short on any CPU


@pytest.mark.slow
def test_a_broken_cxx_compiler_falls_back_to_eager(tmp_path):
    """The real failure: inductor with CXX pointing nowhere and an empty kernel cache."""
    script = textwrap.dedent(
        """
        import json, torch
        from packlm.config.compile_choice import compiler_works
        from packlm.model.lit_module import LitCausalLM
        config = dict(vocab_size=53, context_length=16, n_layer=1, n_head=2, n_embd=16)
        ids = torch.randint(0, 53, (2, 16))
        batch = dict(input_ids=ids, labels=ids, position_ids=torch.arange(16).expand(2, 16),
                     segment_ids=torch.zeros(2, 16, dtype=torch.int32))
        losses = []
        for on in (False, True):
            torch.manual_seed(0)
            lit = LitCausalLM(dict(config, compile="auto"), {})
            lit.use_compiled_views(on, fallback=True)
            losses.append(lit._sum_ce(batch)[0].item())
        print(json.dumps(dict(probe=compiler_works(), losses=losses,
                              compiled=lit.runs_compiled)))
        """
    )
    env = subprocess_env(CXX="/nonexistent/c++", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"))
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    works, detail = got["probe"]
    assert not works and "\n" not in detail
    eager, fell = got["losses"]
    assert fell == eager and got["compiled"] is False
    warnings = [line for line in result.stderr.splitlines() if "model.compile=auto" in line]
    assert len(warnings) == 1 and "model.compile=false" in warnings[0], result.stderr[-3000:]
