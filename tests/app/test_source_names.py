"""One name per source in every TensorBoard tag: the entry's `name`, else its path's stem; two
sources with one stem are told apart by their entry index; Text `data/sources` maps each
name to its path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from packlm.config.sources import source_tag_names, split_source_names
from packlm.train import train

FAMILIES = (
    "Loss/train_by_source/",
    "Loss/val_by_source/",
    "tokens/supervised_by_source/",
    "data/source/",
)


def events(run: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_every_per_source_tag_uses_the_source_name(compose_tiny, tiny_corpus, tmp_path):
    folders = {"a/web": "doc00*", "b/web": "doc0[1-3]*", "c/notes": "doc0[4-5]*"}
    for folder, pattern in folders.items():
        (tmp_path / folder).mkdir(parents=True)
        for f in tiny_corpus.glob(pattern):
            shutil.copy(f, tmp_path / folder)
    sources = (
        f"data.sources=['{tmp_path}/a/web', '{tmp_path}/b/web',"
        f" {{path: '{tmp_path}/c/notes', name: 'my notes'}}]"
    )
    cfg = compose_tiny(sources, "trainer.max_steps=3", "train.validate_at_end=true")
    run = tmp_path / "run"
    train(cfg, run_dir=run)
    acc = events(run)
    tags = acc.Tags()["scalars"]
    for family in FAMILIES:
        names = {t.removeprefix(family).split("/")[0] for t in tags if t.startswith(family)}
        assert names == {"web_0", "web_1", "my_notes"}, family  # not a path, not `0_web`
    text = acc.Tensors("data/sources/text_summary")[0].tensor_proto.string_val[0].decode()
    for name, path in (("web_0", "a/web"), ("web_1", "b/web"), ("my_notes", "c/notes")):
        assert f"| `{name}` | train | `{tmp_path}/{path}` |" in text


@pytest.mark.parametrize(
    ("entries", "names"),
    [
        (["data/web.jsonl.zst", "code/", "web/*.jsonl"], ["web_0", "code", "web_2"]),
        ([{"path": "x.txt", "name": "a b/c"}, "y.txt"], ["a_b_c", "y"]),
        (["a/web.txt", "b/web.txt", "web_1"], ["web_0", "web_1_1", "web_1_2"]),  # a given one
        (["default"], ["default"]),
        (["s3://bucket/notes/*.jsonl", "/abs/0.jsonl"], ["notes", "0"]),
    ],
)
def test_tag_names_are_distinct_and_have_no_slash(entries, names):
    got = source_tag_names(entries)
    assert got == names
    assert len(set(got)) == len(got) and not any("/" in n or " " in n for n in got)


def test_split_names_follow_the_split_config_or_the_store():
    class Data:
        sources = ["a/web.txt", "b/notes.txt"]
        val_sources = ["held/out.txt"]

    assert split_source_names(Data, "train", ["/x/a/web.txt", "/x/b/notes.txt"]) == [
        "web",
        "notes",
    ]
    assert split_source_names(Data, "val", ["/x/held/out.txt"]) == ["out"]
    Data.val_sources = None  # a hash split of data.sources: the same names
    assert split_source_names(Data, "val", ["/x/a/web.txt", "/x/b/notes.txt"]) == ["web", "notes"]
    # a store the config does not describe (a test's own): its own names, as stems
    assert split_source_names(None, "train", ["/p/one.jsonl", "/p/two/"]) == ["one", "two"]
