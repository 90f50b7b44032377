"""URLs that may be written down: a credential in a URL is refused before anything runs, and the
URLs in logs and results have their credential-like parts redacted."""

from __future__ import annotations

from typing import Optional
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from core.errors import ConfigError

# query parameters that carry a credential (api_key, access_token, X-Amz-Signature, sig, …)
_CREDENTIAL_WORDS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "signature", "sig")


def _credential_params(query: str) -> list[str]:
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    return [n for n in names if any(w in n.lower().replace("-", "_") for w in _CREDENTIAL_WORDS)]


def refuse_credentials_in_url(name: str, url: Optional[str]) -> None:
    """A credential in a URL would be written to the run's config and logs: one line, before anything runs."""
    if not url:
        return
    parts = urlsplit(url)
    found = (["user:password"] if parts.username or parts.password else []) + _credential_params(parts.query)
    if found:
        raise ConfigError(
            f"{name} must not carry credentials ({', '.join(found)}): they would be written to the run's "
            "config and logs; put the key in an environment variable and name it with backend.api_key_env"
        )


def public_url(url: str) -> str:
    """The URL without a user:password part or the values of credential-like query
    parameters, fit for logs and results."""
    parts = urlsplit(url)
    secret_params = set(_credential_params(parts.query))
    if parts.username is None and parts.password is None and not secret_params:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    query = urlencode(
        [(k, "REDACTED" if k in secret_params else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
