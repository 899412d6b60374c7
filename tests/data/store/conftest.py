"""The S3 fixtures of the store tests: a moto server (one per session) and, per test, a fresh
bucket behind a recording proxy. They skip where s3fs or moto is not installed."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.object_store import KEY_ID, SECRET, Proxy, free_port

_buckets = itertools.count()


@pytest.fixture(scope="session")
def moto_port():
    pytest.importorskip("s3fs")
    ThreadedMotoServer = pytest.importorskip("moto.server").ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield port
    server.stop()


def s3_env(endpoint: str, tmp_path: Path) -> dict[str, str]:
    """Credentials and endpoint as a user gives them: environment variables only."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "2",  # an unreachable endpoint fails in about a second
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@pytest.fixture
def s3(moto_port, monkeypatch, tmp_path):
    """A fresh bucket behind a recording proxy; s3fs reaches it through AWS_ENDPOINT_URL."""
    proxy = Proxy(moto_port).start()
    env = s3_env(f"http://127.0.0.1:{proxy.port}", tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    bucket = f"corpus-{next(_buckets)}"
    boto3 = pytest.importorskip("boto3")
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{moto_port}")
    client.create_bucket(Bucket=bucket)

    def put(key: str, body: bytes, acl: str = "private") -> None:
        client.put_object(Bucket=bucket, Key=key, Body=body, ACL=acl)

    def upload(root: Path, prefix: str, acl: str = "private") -> None:
        for f in sorted(root.iterdir()):
            put(f"{prefix}/{f.name}", f.read_bytes(), acl)

    yield SimpleNamespace(proxy=proxy, bucket=bucket, url=f"s3://{bucket}", put=put,
                          upload=upload, env=env, moto_port=moto_port)  # fmt: skip
    proxy.stop()
