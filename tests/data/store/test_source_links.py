"""Corpora through links (docs/links.md): each real file read once, loops end, and what is
left out counted by reason and named: symlinks and hard links, loops, dangling links, links
out of the folder, FIFOs and devices, globs with and without `**`, links given directly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from packlm.data.store.corpus import Corpus
from packlm.data.store.sources import (
    ReadCounts,
    ReadOptions,
    SourceError,
    iter_documents,
    resolve_sources,
)
from packlm.data.store.sources.walk import split_glob
from packlm.errors import ConfigError


def read(entries) -> tuple[list[str], ReadCounts]:
    counts = ReadCounts()
    docs = iter_documents(resolve_sources(entries), ReadOptions(), counts)
    return [d.text for d in docs], counts


def names(entry) -> list[str]:
    return [str(f) for f in resolve_sources([entry])[0].files]


@pytest.fixture
def loopy(tmp_path) -> Path:
    """The issue's tree: loopy/{a,c}.txt, loopy/sub/b.txt, loopy/sub/up -> .."""
    root = tmp_path / "loopy"
    (root / "sub").mkdir(parents=True)
    for name, text in [("a.txt", "ant"), ("c.txt", "cat"), ("sub/b.txt", "bee")]:
        (root / name).write_text(text)
    os.symlink("..", root / "sub" / "up")
    return root


@pytest.mark.parametrize("pattern", ["**/*.txt", "**", "*/*/*/*.txt", "sub/up/sub/up/**/*.txt"])
def test_a_link_loop_under_a_glob_reads_each_file_once(loopy, pattern):
    """Before: `loopy/**/*.txt` listed each file ~40 times (123 documents instead of 3)."""
    texts, counts = read([f"{loopy}/{pattern}"])
    assert len(texts) == len(set(texts)) and set(texts) <= {"ant", "bee", "cat"}
    if "**" in pattern:
        assert sorted(texts) == ["ant", "bee", "cat"]
        assert sum(counts.dropped().values()) >= 1  # the loop is counted, never silent


def test_a_loop_is_counted_and_named_in_a_directory_walk_and_a_glob(loopy):
    for entry in [str(loopy), f"{loopy}/**/*.txt"]:
        texts, counts = read([entry])
        assert sorted(texts) == ["ant", "bee", "cat"]
        assert counts.left_out == {"folders_reached_again": [f"{loopy}/sub/up (walked as {loopy})"]}
        assert counts.dropped()["folders_reached_again"] == 1


def test_a_symlinked_subfolder_is_walked_not_dropped(tmp_path):
    """Before: a folder holding a symlinked subfolder dropped its files, 'skipped: nothing'."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "far.txt").write_text("far away")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "near.txt").write_text("near")
    os.symlink(tmp_path / "elsewhere", tmp_path / "corpus" / "linked")
    for entry in [tmp_path / "corpus", f"{tmp_path}/corpus/**/*.txt", f"{tmp_path}/corpus/*/*"]:
        texts, counts = read([str(entry)])
        assert "far away" in texts and sum(counts.dropped().values()) == 0


def test_second_names_of_a_file_are_read_once_under_its_own_name(tmp_path):
    """A symlink and a hard link to a file of the walk: one document, the others named."""
    root = tmp_path / "d"
    root.mkdir()
    (root / "real.txt").write_text("the only copy")
    os.symlink("real.txt", root / "a_link.txt")  # sorts first, yet the real name is read
    os.link(root / "real.txt", root / "z_hard.txt")
    texts, counts = read([str(root)])
    assert texts == ["the only copy"]
    assert names(str(root)) == [f"{root}/real.txt"]
    assert counts.left_out == {
        "second_names": [
            f"{root}/z_hard.txt (read as {root}/real.txt)",
            f"{root}/a_link.txt (read as {root}/real.txt)",
        ]
    }


def test_a_link_to_a_file_outside_the_folder_is_read_under_the_links_name(tmp_path):
    (tmp_path / "out.txt").write_text("from outside")
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "out.txt", tmp_path / "d" / "in.txt")
    texts, counts = read([str(tmp_path / "d")])
    assert texts == ["from outside"] and sum(counts.dropped().values()) == 0
    source = resolve_sources([str(tmp_path / "d")])[0]
    assert source.stats[0][0] == str(tmp_path / "out.txt")  # the fingerprint names the target


def test_dangling_and_looping_links_and_special_files_are_counted_and_named(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    (root / "ok.txt").write_text("fine")
    os.symlink("gone.txt", root / "dangling.txt")
    os.symlink("self.txt", root / "self.txt")  # ELOOP
    os.mkfifo(root / "pipe.txt")  # a walk must not block on it
    os.symlink("/dev/zero", root / "zero.txt")  # nor read a device forever
    texts, counts = read([str(root)])
    assert texts == ["fine"]
    assert counts.left_out == {
        "broken_links": [f"{root}/dangling.txt -> gone.txt", f"{root}/self.txt -> self.txt"]
    }
    assert counts.dropped()["special_files"] == 2 and counts.dropped()["broken_links"] == 2


def test_a_glob_matching_only_left_out_entries_names_them(tmp_path):
    os.symlink("gone.txt", tmp_path / "a.txt")
    with pytest.raises(SourceError, match=r"matched no files \(left out: 1 broken links: .*a\.txt -> gone\.txt\)"):  # fmt: skip
        resolve_sources([f"{tmp_path}/*.txt"])


def test_a_link_given_directly_is_read_and_a_fifo_given_directly_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x.txt").write_text("x")
    os.symlink(tmp_path / "real", tmp_path / "dirlink")
    os.symlink(tmp_path / "real" / "x.txt", tmp_path / "filelink.txt")
    assert read([str(tmp_path / "dirlink")])[0] == ["x"]
    assert read([str(tmp_path / "filelink.txt")])[0] == ["x"]
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(SourceError, match="not a regular file"):
        resolve_sources([str(tmp_path / "pipe")])


@pytest.mark.parametrize(
    "second",
    ["a.txt", "link.txt", "hard.txt", "*.txt", "dirlink", "{tmp}/./a.txt"],
)
def test_one_file_under_two_entries_is_refused_whatever_its_names(tmp_path, monkeypatch, second):
    """Two entries reaching one real file (the same name, a symlink, a hard link, a glob, a
    linked folder) would count its documents twice: a config error naming both entries."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("once")
    os.symlink("a.txt", tmp_path / "link.txt")
    os.link(tmp_path / "a.txt", tmp_path / "hard.txt")
    os.symlink(".", tmp_path / "dirlink")
    first = "a.txt" if second != "a.txt" else str(tmp_path / "a.txt")
    with pytest.raises(ConfigError, match=r"data\.sources\[0\]=.* and data\.sources\[1\]=.* both read"):  # fmt: skip
        resolve_sources([first, second.format(tmp=tmp_path)])


def test_hidden_names_are_matched_only_by_a_pattern_part_with_a_dot(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.txt").write_text("hidden")
    (tmp_path / "y.txt").write_text("shown")
    assert read([f"{tmp_path}/**/*.txt"])[0] == ["shown"]
    assert read([str(tmp_path)])[0] == ["shown"]
    assert read([f"{tmp_path}/.git/*.txt"])[0] == ["hidden"]


def test_split_glob_takes_the_folder_before_the_first_glob_part():
    assert split_glob("a/b/*/c/**/*.txt") == (Path("a/b"), ("*", "c", "**", "*.txt"))
    assert split_glob("*.txt") == (Path("."), ("*.txt",))
    assert split_glob("/x/y?.txt") == (Path("/x"), ("y?.txt",))


def test_files_are_read_sorted_by_path_through_links(tmp_path):
    """The reading order (hence doc order and ids) is the sorted paths, as before links."""
    for rel in ["b/2.txt", "a.txt", "b/1.txt", "c/3.txt"]:
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert read([str(tmp_path)])[0] == ["a.txt", "b/1.txt", "b/2.txt", "c/3.txt"]


def test_retargeting_a_link_changes_the_fingerprint_even_with_the_same_size_and_mtime(tmp_path):
    """The cache key holds each file's resolved path, size and mtime: a link pointed at
    another file (same bytes count, same mtime) is another corpus."""
    from packlm.config.data import DataConfig

    for name in ("v1.txt", "v2.txt"):
        (tmp_path / name).write_text(f"text of {name}")
        os.utime(tmp_path / name, ns=(10**18, 10**18))
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "v1.txt", tmp_path / "d" / "cur.txt")
    data = DataConfig(sources=[str(tmp_path / "d")])
    before = Corpus.from_config(data).fingerprint()
    os.remove(tmp_path / "d" / "cur.txt")
    os.symlink(tmp_path / "v2.txt", tmp_path / "d" / "cur.txt")
    assert Corpus.from_config(data).fingerprint() != before
