"""Issue #59, family 4, second round: the tools that take paths on their own command line
(`python -m packlm.cache`, `compare`, `trace`) refuse a URL holding a credential in one
masked line, exit 2, as train.py and the Hydra tools do. Before, each quoted it back whole:
`compare https://u:TOKEN@h/x` said `error: https:/u:TOKEN@h/x: no such directory`, `cache
--cache-dir https://u:TOKEN@h/x` printed `https://u:TOKEN@h/x: no cache entries` (exit 0),
`trace https://u:TOKEN@h/run step=1` `https:/u:TOKEN@h/run: no such run directory`."""

from __future__ import annotations

import pytest

from packlm.commands import cache, compare
from packlm.commands.trace import cli as trace

SECRET = "Tok3nSECRET9"

CASES = [
    (compare.main, [f"https://u:{SECRET}@h/runs"], "argument 1"),
    (compare.main, ["/nowhere", f"--out=https://h/x.png?access_token={SECRET}"], "--out"),
    (compare.main, ["/nowhere", "--out", f"s3://AKIA:{SECRET}@b/x.png"], "--out"),
    (cache.main, ["--cache-dir", f"https://u:{SECRET}@h/c"], "--cache-dir"),
    (cache.main, ["--cache-dir", f"https://u:{SECRET}@h/c", "list"], "--cache-dir"),
    (cache.main, ["remove", f"https://h/x?X-Amz-Signature={SECRET}"], "argument 2"),
    (trace.main, [f"https://u:{SECRET}@h/run", "step=1"], "argument 1"),
    (trace.main, [f"/runs/a?sig={SECRET}", f"hf://user:{SECRET}@x/y", "step=1"], "argument 2"),
]


@pytest.mark.parametrize(("main", "argv", "key"), CASES)
def test_a_credential_in_a_tool_argument_is_refused_masked(main, argv, key, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2
    assert SECRET not in out + err
    (line,) = err.splitlines()
    assert line.startswith(f"error: {key}: the URL ") and "***" in line, line


@pytest.mark.parametrize(("main", "argv", "key"), CASES[:1] + CASES[-2:-1])
def test_with_hydra_full_error_the_traceback_holds_no_secret(main, argv, key, monkeypatch):
    """HYDRA_FULL_ERROR=1 shows tracebacks: the error it raises is the masked one."""
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises((SystemExit, ValueError)) as raised:
        main(argv)
    assert SECRET not in str(raised.value)


def test_paths_without_a_credential_pass(tmp_path, capsys):
    """A plain URL, a port, or a path with '@' in a folder name is no credential."""
    cache.main(["--cache-dir", str(tmp_path / "me@home" / "c"), "list"])
    assert "no cache entries" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        compare.main([str(tmp_path / "nothing"), "--out", "http://host:8080/x.png"])
    assert "holds a credential" not in str(stop.value.code)
