"""No credential in a config value: a URL with a user or password part, or a query parameter
that carries a secret, is refused, and the error shows the URL with the secret masked.

Hydra writes every override and the composed config into the run folder (.hydra/) when the
job starts, and packlm saves the config in checkpoints and TensorBoard: a token typed into a
URL would be on disk for good. Credentials belong in the environment or the profile files the
filesystem reads (AWS_*, HF_TOKEN, ~/.aws/credentials), which packlm never reads or writes.
The precheck (`packlm.config.precheck`) runs this on the command line and on the composed
config before Hydra writes anything; the remote sources run it again before they open a URL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from packlm.errors import ConfigError

URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s,'\"\[\]{}]+")
"""A URL inside an override or a config string (lists and quotes end it)."""
SECRET_WORDS = {
    "token", "auth", "authorization", "key", "apikey", "sig", "signature", "secret",
    "password", "passwd", "pwd", "pass", "credential", "credentials", "session", "sessionid",
    "jwt", "bearer", "code",
}  # fmt: skip
"""Parts of a query parameter's name that mark its value as a secret (access_token, api-key,
X-Amz-Signature, sig of an Azure SAS, ...)."""
SECRET_PREFIXES = ("x-amz-", "x-goog-", "x-ms-")
"""Signed-URL parameters of S3, GCS and Azure: every one belongs to the signature."""
USERINFO = re.compile(
    r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@]*@|[^@/?#:]*:(?!\d+(?:[/?#]|$))[^@?#]*@)"
)
"""`scheme://user@` or `scheme://user:password@`, the password possibly holding `/` (AWS
secret keys do), which a URL parser reads as the start of the path; `host:8080/` is a port."""


def _secret_parameter(name: str) -> bool:
    lowered = name.lower()
    if lowered.startswith(SECRET_PREFIXES):
        return True
    words = re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()  # accessToken -> access_token
    parts = [p for p in re.split(r"[^a-z0-9]+", words) if p]
    return any(
        p in SECRET_WORDS or p.endswith(("token", "key", "secret", "password", "signature"))
        for p in parts
    )


def masked_url(url: str) -> str | None:
    """`url` with its user/password part and secret query values as `***`, or None when it
    carries no credential."""
    secret = False
    user = USERINFO.match(url)
    if user:
        url = user.group(1) + "***@" + url[user.end() :]
        secret = True
    try:
        parts = urlsplit(url)
    except ValueError:  # an invalid IPv6 netloc: the user part is masked above
        return url if secret else None
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(_secret_parameter(k) for k, _ in pairs):
        query = "&".join(f"{k}=***" if _secret_parameter(k) else f"{k}={v}" for k, v in pairs)
        secret = True
    if not secret:
        return None
    return parts._replace(query=query, fragment="").geturl()


def check_text(key: str, text: str) -> None:
    """ConfigError naming `key` when a URL in `text` carries a credential (masked)."""
    for url in URL_IN_TEXT.findall(text):
        masked = masked_url(url)
        if masked is not None:
            raise ConfigError(
                f"{key}: the URL {masked} holds a credential (a user or password part, or a "
                "token, key or signature in its query); give credentials through the "
                "environment or profile files (AWS_*, HF_TOKEN, ~/.aws/credentials), never in "
                "a config value: Hydra saves every value with the run"
            )


def strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, text) of every string in a plain config value, nested keys as `a.b[0].c`."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from strings(v, f"{key}[{i}]")


def check_config(values: Any) -> None:
    """ConfigError naming the first key of `values` (a plain container) whose string holds a
    URL with a credential."""
    for key, text in strings(values):
        check_text(key, text)


def check_arguments(argv: list[str]) -> None:
    """ConfigError naming the argument (`--cache-dir`, `out=`, or its position) whose URL holds
    a credential: for the tools that take paths on their command line (cache, compare, trace),
    which would otherwise echo it in a line such as "<path>: no such directory"."""
    for i, arg in enumerate(map(str, argv)):
        flag, sep, _ = arg.partition("=")
        if sep and "://" not in flag:
            key = flag
        elif i and argv[i - 1].startswith("-"):
            key = argv[i - 1]
        else:
            key = f"argument {i + 1}"
        check_text(key, arg)
