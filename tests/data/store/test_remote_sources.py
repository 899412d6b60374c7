"""Sources in object storage, read from a real S3-compatible server (moto) through s3fs: the
same stores as from local files, a changed object re-read, errors as one line, a dropped
connection retried. packlm's reading code is not mocked anywhere."""

from __future__ import annotations

import gzip
import json
import logging

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

from helpers.object_store import SECRET, free_port  # noqa: E402
from helpers.stores import data_config, decoded, prepare, write_corpus  # noqa: E402
from packlm.config.tokenizer import TokenizerConfig  # noqa: E402
from packlm.data.store.prepared import prepare_stores  # noqa: E402
from packlm.data.store.sources import SourceError  # noqa: E402
from packlm.data.store.sources import remote as remote_reading  # noqa: E402
from packlm.errors import ConfigError  # noqa: E402


def test_every_format_reads_from_s3_as_from_disk(s3, tmp_path):
    """Text split on a separator, a span of a text file, zstd JSONL, gzip text and Parquet:
    the same documents, in the same order, as the local files give; ids name the URL."""
    zstd = pytest.importorskip("zstandard")
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    root = tmp_path / "local"
    write_corpus(root)
    jsonl = (root / "c.jsonl").read_bytes()
    (root / "c.jsonl").unlink()
    (root / "c.jsonl.zst").write_bytes(zstd.ZstdCompressor().compress(jsonl))
    (root / "b.txt.gz").write_bytes(gzip.compress((root / "b.txt").read_bytes()))
    (root / "b.txt").unlink()
    texts = [json.loads(line)["text"] for line in jsonl.decode().splitlines()]
    pq.write_table(pa.table({"text": texts[::-1]}), root / "d.parquet")
    s3.upload(root, "p")

    def entries(base: str) -> list:
        return [{"path": f"{base}/a.txt", "span": [0, 0.6]}, f"{base}/*.gz",
                f"{base}/c.jsonl.zst", f"{base}/d.parquet"]  # fmt: skip

    local = prepare(root, tmp_path / "cache", sources=entries(str(root)))
    remote = prepare(root, tmp_path / "cache", sources=entries(f"{s3.url}/p"))
    for split in ("train", "val"):
        assert decoded(remote, split) == decoded(local, split)
    ids = [remote.open("train").doc_id(d) for d in range(remote.open("train").n_docs)]
    assert {i.split(":", 1)[1].rsplit(":", 1)[0].split("@")[0] for i in ids} == {
        f"{s3.url}/p/{name}" for name in ("a.txt", "b.txt.gz", "c.jsonl.zst", "d.parquet")
    }


def test_an_unchanged_object_is_not_read_again_a_changed_one_is(s3, tmp_path):
    root = tmp_path / "local"
    write_corpus(root)
    s3.upload(root, "p")
    sources = [f"{s3.url}/p/"]  # a prefix: every object under it
    first = prepare(root, tmp_path / "cache", sources=sources)
    assert s3.proxy.gets("/p/c.jsonl"), "the first run reads every object"

    s3.proxy.requests.clear()
    again = prepare(root, tmp_path / "cache", sources=sources)
    assert s3.proxy.gets() == [], "an unchanged listing reuses the store without a read"
    assert again.train_dir == first.train_dir

    records = (root / "c.jsonl").read_text() + json.dumps({"text": "a record added later"})
    s3.put("p/c.jsonl", records.encode())  # same key, new ETag and size
    changed = prepare(root, tmp_path / "cache", sources=sources)
    assert changed.train_dir != first.train_dir
    assert s3.proxy.gets("/p/c.jsonl"), "the changed object is read again"
    texts = decoded(changed, "train") + decoded(changed, "val")
    assert "a record added later" in texts


def test_with_shards_only_the_shard_of_a_changed_object_is_read_again(s3, tmp_path):
    """data.shards=2 over four objects (two a shard), a fixed tokenizer: after one object
    changes, its shard is rebuilt from the objects of that shard alone."""
    root = tmp_path / "local"
    root.mkdir()
    for k in range(4):
        (root / f"f{k}.txt").write_text("\n\n".join(f"file {k} doc {i}" for i in range(30)))
    s3.upload(root, "p")
    cache = tmp_path / "cache"
    local = prepare(root, cache, sources=[f"{root}/*.txt"])
    tokenizer = TokenizerConfig(path=str(local.tokenizer_dir))
    data = data_config(root, sources=[f"{s3.url}/p/"], shards=2)
    prepare_stores(data, tokenizer, cache, progress=False, build_shards=True)
    assert all(s3.proxy.gets(f"/p/f{k}.txt") for k in range(4))

    s3.proxy.requests.clear()
    s3.put("p/f3.txt", (root / "f3.txt").read_bytes() + b"\n\none more document")
    changed = prepare_stores(data, tokenizer, cache, progress=False, build_shards=True)
    read = {k for k in range(4) if s3.proxy.gets(f"/p/f{k}.txt")}
    assert read == {2, 3}, f"objects read again: {sorted(read)} (shard 1 is f2, f3)"
    assert "one more document" in decoded(changed, "train") + decoded(changed, "val")


def test_a_dropped_connection_is_retried_and_the_store_is_the_same(s3, tmp_path):
    root = tmp_path / "local"
    root.mkdir()
    big = "\n\n".join(f"paragraph {i}: " + "words and more words " * 40 for i in range(400))
    (root / "cut.txt").write_text(big, encoding="utf-8")  # ~330 kB, many range reads
    s3.upload(root, "p")
    s3.proxy.cut_after, s3.proxy.cuts = 20_000, 2  # the first two GETs of it end early
    remote = prepare(root, tmp_path / "cache", sources=[f"{s3.url}/p/cut.txt"])
    assert s3.proxy.cuts == 0, "the proxy cut no connection"
    local = prepare(root, tmp_path / "cache", sources=[str(root / "cut.txt")])
    assert decoded(remote, "train") == decoded(local, "train")
    assert decoded(remote, "val") == decoded(local, "val")


def test_packlms_own_retry_reopens_an_https_object_where_it_broke(s3, tmp_path, caplog):
    """http(s):// has no retry of its own in fsspec: packlm's reopens the object at the
    offset reached, logged; the documents are those of the local file."""
    pytest.importorskip("aiohttp")
    root = tmp_path / "local"
    root.mkdir()
    (root / "cut.txt").write_text("\n\n".join(f"doc {i} " + "x y z " * 60 for i in range(300)))
    s3.upload(root, "p", acl="public-read")  # served to an unsigned GET
    s3.proxy.cut_after, s3.proxy.cuts = 30_000, 1
    url = f"http://127.0.0.1:{s3.proxy.port}/{s3.bucket}/p/cut.txt"
    with caplog.at_level(logging.WARNING, logger="packlm.data.store.sources.remote"):
        remote = prepare(root, tmp_path / "cache", sources=[url])
    assert s3.proxy.cuts == 0
    assert any("retrying (1 of" in r.getMessage() for r in caplog.records), caplog.text
    local = prepare(root, tmp_path / "cache", sources=[str(root / "cut.txt")])
    assert decoded(remote, "train") == decoded(local, "train")


@pytest.mark.parametrize("where", ["no-such-bucket-here/x/*.txt", "no-such-bucket-here/x/"])
def test_a_missing_bucket_is_one_line_naming_the_entry(s3, tmp_path, where):
    with pytest.raises(SourceError) as e:
        prepare(tmp_path, tmp_path / "cache", sources=[f"s3://{where}"])
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"data.sources[0]='s3://{where}': cannot list it (")
    assert "bucket does not exist" in message


def test_a_missing_prefix_or_an_empty_glob_is_one_line(s3, tmp_path):
    s3.put("p/a.txt", b"text")
    with pytest.raises(SourceError, match=r"^data.sources\[0\]=.*no such object or prefix"):
        prepare(tmp_path, tmp_path / "cache", sources=[f"{s3.url}/q/"])
    with pytest.raises(SourceError, match=r"^data.sources\[0\]=.*/p/\*.jsonl': no objects there"):
        prepare(tmp_path, tmp_path / "cache", sources=[f"{s3.url}/p/*.jsonl"])


def test_wrong_credentials_are_one_line_saying_so(s3, tmp_path, monkeypatch):
    import moto.settings

    s3.put("p/a.txt", b"some text")
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # check every key
    with pytest.raises(SourceError) as e:
        prepare(tmp_path, tmp_path / "cache", sources=[f"{s3.url}/p/a.txt"])
    message = str(e.value)
    assert "\n" not in message and message.startswith("data.sources[0]=")
    assert "Forbidden" in message or "Access Key Id you provided does not exist" in message
    assert "check the credentials" in message
    assert SECRET not in message


def test_an_unreachable_endpoint_fails_before_any_work(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(SourceError) as e:
        prepare(tmp_path, tmp_path / "cache", sources=[f"{s3.url}/p/"])
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"data.sources[0]='{s3.url}/p/'")
    assert "Could not connect to the endpoint URL" in message and "AWS_ENDPOINT_URL" in message
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.bin"))


def test_a_scheme_without_its_extra_names_the_extra(tmp_path):
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401

        pytest.skip("gcsfs is installed")
    except ImportError:
        pass
    with pytest.raises(SourceError, match=r'^data.sources\[0\]=.*pip install -e "\.\[gcs\]"'):
        prepare(tmp_path, tmp_path / "cache", sources=["gs://bucket/shards/*.jsonl"])


@pytest.mark.parametrize(
    "url",
    [
        "https://me:hunter2@example.org/x.txt",
        "https://b.s3.amazonaws.com/x.txt?X-Amz-Credential=AK%2F1&X-Amz-Signature=abc123",
        "https://acct.blob.core.windows.net/c/x.txt?sv=1&sig=abc123",
        "https://example.org/x.txt?access_token=abc123",
    ],
)
def test_a_credential_in_the_url_is_refused_without_echoing_it(tmp_path, url):
    with pytest.raises(ConfigError) as e:
        prepare(tmp_path, tmp_path / "cache", sources=[url])
    assert str(e.value).startswith("data.sources[0]: the URL https://")
    assert "***" in str(e.value) and "holds a credential" in str(e.value)
    assert "hunter2" not in str(e.value) and "abc123" not in str(e.value)


def test_a_failed_read_leaves_no_store_behind(s3, tmp_path, monkeypatch):
    """An object whose every read breaks fails the build with one line naming it; the store
    being written (under a temporary name) is gone, and the next run builds it whole."""
    root = tmp_path / "local"
    root.mkdir()
    (root / "cut.txt").write_text("\n\n".join(f"doc {i} " + "a b " * 80 for i in range(300)))
    s3.upload(root, "p")
    cache = tmp_path / "cache"
    local = prepare(root, cache, sources=[str(root / "cut.txt")])
    tokenizer = TokenizerConfig(path=str(local.tokenizer_dir))  # the build is what reads
    entries = lambda: sorted(p.name for p in (cache / "stores").iterdir() if p.name[0] != ".")  # noqa: E731
    before = entries()
    monkeypatch.setattr(remote_reading, "RETRIES", 1)  # s3fs retries each range read 5 times too
    s3.proxy.cut_after, s3.proxy.cuts = 10_000, 10**6  # every GET of it breaks
    with pytest.raises(SourceError, match=r"^s3://.*/p/cut.txt: cannot read at byte"):
        prepare(root, cache, tokenizer, sources=[f"{s3.url}/p/cut.txt"])
    assert entries() == before, "a store entry was left from the failed build"
    s3.proxy.cuts = 0
    remote = prepare(root, cache, tokenizer, sources=[f"{s3.url}/p/cut.txt"])
    assert decoded(remote, "train") == decoded(local, "train")
