"""TLS files: one-line reasons why a certificate, key or CA file cannot be used."""

from __future__ import annotations

import ssl


def is_tls_url(url: str) -> bool:
    """Whether a Redis URL asks for TLS: ``rediss://``, or Sentinels with ``rediss+sentinel://``."""
    return url.lower().startswith(("rediss://", "rediss+sentinel://"))


def tls_problem(error: BaseException) -> str:
    """One line saying why a certificate or key could not be loaded."""
    if isinstance(error, OSError) and not isinstance(error, ssl.SSLError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    text = str(error).strip() or type(error).__name__
    if isinstance(error, ssl.SSLError) and error.reason:
        text = f"{error.reason.replace('_', ' ').lower()} ({error.library or 'ssl'})"
    return " ".join(text.split())


def check_pem(path: str, what: str) -> None:
    """Raise ``ValueError`` (one line) unless ``path`` reads and holds a PEM ``what``:
    ``"certificate"`` or ``"private key"``."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise ValueError(f"cannot read the {what} file: {tls_problem(error)}") from None
    marker = b"CERTIFICATE-----" if what == "certificate" else b"PRIVATE KEY-----"
    if b"-----BEGIN " not in data or marker not in data:
        raise ValueError(f"{path} holds no PEM {what}") from None


def check_client_files(ca: str | None, cert: str | None, key: str | None) -> None:
    """Raise ``ValueError`` (one line) unless the CA file and the client certificate and key load."""
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs its key, and a key its certificate")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca is not None:
        check_pem(ca, "certificate")
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot use the CA file {ca}: {tls_problem(error)}") from None
    if cert is not None and key is not None:
        check_pem(cert, "certificate")
        check_pem(key, "private key")
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as error:
            raise ValueError(
                f"cannot use the client certificate {cert} with the key {key}: {tls_problem(error)}"
            ) from None
        except OSError as error:
            raise ValueError(f"cannot read the client certificate or key: {tls_problem(error)}") from None
