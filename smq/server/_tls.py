"""HTTPS for ``smq serve``: the server's TLS context, and its reload on SIGHUP."""

from __future__ import annotations

import logging
import ssl

from ..connection._tls import check_pem, tls_problem

log = logging.getLogger("smq.serve")


def _load(context: ssl.SSLContext, cert: str, key: str) -> None:
    check_pem(cert, "certificate")
    check_pem(key, "private key")
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as error:
        problem = tls_problem(error)
        raise ValueError(f"cannot use the certificate {cert} with the key {key}: {problem}") from None
    except OSError as error:
        raise ValueError(f"cannot read the certificate or key: {tls_problem(error)}") from None


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context of TLS 1.2 or newer with the certificate (chain) ``cert`` and its ``key``.

    Raises ``ValueError`` (one line) when a file is missing, unreadable, or
    the key does not match the certificate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context, cert, key)
    return context


def reload_certificate(context: ssl.SSLContext, cert: str, key: str) -> bool:
    """Load ``cert`` and ``key`` anew into ``context``: new connections get them.

    The files are tried in a fresh context first; if they fail, one line is
    logged and ``context`` keeps the certificate it had.
    """
    try:
        server_context(cert, key)
        _load(context, cert, key)
    except ValueError as error:
        log.error("SIGHUP: keeping the current certificate: %s", error)
        return False
    log.info("SIGHUP: reloaded the certificate %s and the key %s", cert, key)
    return True
