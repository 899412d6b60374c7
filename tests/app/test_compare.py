"""A tiny two-run sweep with the TensorBoard callbacks: what each tab gets, and packlm.compare."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from hydra import compose, initialize_config_dir
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.runs import tiny_overrides
from packlm.commands.compare import compare, figure, log_steps, main, read_run
from packlm.config.schema import CONFIG_DIR
from packlm.train import train

STRIDES = (16, 32)


@pytest.fixture(scope="module")
def sweep(tiny_corpus, tmp_path_factory) -> tuple[Path, dict[int, dict[str, float]]]:
    """multirun-like directory with one run per stride; the metrics train() returned."""
    root = tmp_path_factory.mktemp("multirun")
    cache = tmp_path_factory.getbasetemp() / "cache"
    metrics = {}
    for job, stride in enumerate(STRIDES):
        overrides = tiny_overrides(tiny_corpus, cache, f"data.stride={stride}")
        with initialize_config_dir(CONFIG_DIR, version_base=None):
            cfg = compose("config", overrides=overrides)
        run = root / f"{job}_stride={stride}"
        metrics[stride] = train(cfg, run_dir=run)  # train.py adds the TensorBoard callbacks
        (run / ".hydra").mkdir()  # as Hydra writes it for a multirun job
        (run / ".hydra" / "overrides.yaml").write_text(
            yaml.safe_dump([f"data.stride={stride}", f"+tag=job{job}", "trainer.max_steps=6"])
        )
    return root, metrics


def events_of(run: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_a_run_opens_on_its_loss_curves_then_the_packing_pictures(sweep):
    root, _ = sweep
    events = events_of(root / "0_stride=16")
    tags = events.Tags()
    scalars = set(tags["scalars"])
    groups = sorted({t.split("/", 1)[0] for t in scalars | set(tags["images"])})
    assert groups[:2] == ["Loss", "Packing"]  # Time Series opens the first two groups
    for mirror, tag in (("Loss/train", "train/loss"), ("Loss/val", "val/loss")):
        assert [e.step for e in events.Scalars(mirror)] == [e.step for e in events.Scalars(tag)]
        assert [e.value for e in events.Scalars(mirror)] == pytest.approx(
            [e.value for e in events.Scalars(tag)]
        )
    assert "Loss/val_bpb" in scalars and "val/bpb" in scalars
    data_scalars = {t for t in scalars if t.startswith("data/") and "/source/" not in t}
    assert len(data_scalars) <= 8  # a few lines; the rest is the table
    assert {"Packing/attention_mask", "Packing/batch_layout", "Packing/coverage"} <= set(
        tags["images"]
    )
    texts = {t.removesuffix("/text_summary") for t in tags["tensors"]}
    assert {"data/epoch_statistics", "data/training_row"} <= texts
    table = events.Tensors("data/epoch_statistics/text_summary")[0].tensor_proto.string_val[0]
    assert b"|  | epoch 0 |" in table and b"window 32, stride 16" in table


def test_compare_has_one_row_per_job_with_what_the_sweep_varied(sweep, tmp_path):
    root, metrics = sweep
    text, png = compare([root], tmp_path / "sweep.png")
    lines = text.splitlines()
    header = lines[0].split()
    assert header[:3] == ["run", "data.stride", "tag"]  # varied; window is the same
    assert "data.window" not in header and "trainer.max_steps" not in header
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == [f"{j}_stride={s}" for j, s in enumerate(STRIDES)]
    for row, stride in zip(rows, STRIDES, strict=True):
        m = metrics[stride]
        assert row[1] == str(stride) and row[2] == f"job{STRIDES.index(stride)}"
        assert row[3] == f"{m['tokens/supervised']:,.0f}"
        assert float(row[4]) > 0  # wall time
        assert row[5] == f"{m['val/loss']:.4f}" and row[6] == f"{m['val/bpb']:.4f}"
        val = events_of(root / row[0]).Scalars("val/loss")
        # the log's step: the validation after step k is at TensorBoard's index k-1
        assert len(val) == 2 and int(row[7]) == min(val, key=lambda e: e.value).step + 1
    image = np.asarray(Image.open(png))
    assert image.shape[0] > 100 and image.shape[1] > 100


def test_compare_cli_prints_the_table_and_names_a_path_without_runs(sweep, tmp_path, capsys):
    root, _ = sweep
    main([str(root / "0_stride=16"), str(root / "1_stride=32"), "--out", str(tmp_path / "c.png")])
    out = capsys.readouterr().out
    assert "0_stride=16" in out and "1_stride=32" in out and (tmp_path / "c.png").is_file()
    with pytest.raises(SystemExit, match="no run below it"):
        main([str(tmp_path)])


def test_best_step_is_the_step_the_log_said(sweep):
    root, _ = sweep
    # the log said "validation at step 3" and "... at step 6"; TensorBoard has them at 2, 5
    row = read_run(root / "0_stride=16")
    assert [e.step for e in events_of(root / "0_stride=16").Scalars("val/loss")] == [2, 5]
    assert list(row["curve steps"]) == [3, 6] and row["best step"] in (3, 6)


@pytest.mark.parametrize(
    ("val", "train", "steps"),
    [
        ([2, 5], [0, 1, 2, 3, 4, 5], [3, 6]),  # inside fit: index k-1
        ([2, 5], [0, 1, 2, 3, 4], [3, 5]),  # trainer.validate after 5 steps: index 5
        ([9], [], [10]),  # no training curve read: inside fit
    ],
)
def test_log_steps_of_validations(val, train, steps):
    got = log_steps(np.array(val, dtype=np.int64), np.array(train, dtype=np.int64))
    assert got.tolist() == steps


def test_one_validation_per_job_reads_as_labelled_points_on_plain_token_counts():
    rows = [
        {
            "run": Path(f"{j}_stride={s}"),
            "settings": {"data.stride": str(s)},
            "curve": (np.array([40948 + 2 * j]), np.array([1.5 - 0.01 * j])),
            "curve steps": np.array([10]),
        }
        for j, s in enumerate((32, 64, 128))
    ]
    fig = figure(rows)
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.xaxis.get_offset_text().get_text() == ""  # no "+4.095e4" offset
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) >= 2 and all(re.fullmatch(r"\d{1,3}(,\d{3})*", x) for x in labels)
    assert all(".0" not in x for x in labels)
    notes = sorted(t.get_text() for t in ax.texts)
    assert notes == ["stride=128, step 10", "stride=32, step 10", "stride=64, step 10"]
