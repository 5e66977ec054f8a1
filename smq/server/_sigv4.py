"""AWS Signature Version 4: check who signed a request to the HTTP API.

Both forms SDKs send are accepted: the ``Authorization`` header, and the
presigned URL whose ``X-Amz-*`` query parameters carry the same fields. The
canonical request is the one of non-S3 services, as botocore builds it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import NamedTuple
from urllib.parse import quote, unquote_to_bytes

from ._errors import SqsError

ALGORITHM = "AWS4-HMAC-SHA256"
TERMINATOR = "aws4_request"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_EXPIRES_SECONDS = 604800  # a presigned URL lives a week at most
_AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"
_AMZ_DATE = re.compile(r"[0-9]{8}T[0-9]{6}Z")
_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)


class _Claim(NamedTuple):
    """What the request says about its signature."""

    algorithm: str
    credential: str  # <key id>/<YYYYMMDD>/<region>/<service>/aws4_request
    signed_headers: str  # lowercase names joined by ";"
    signature: str
    amz_date: str  # YYYYMMDDTHHMMSSZ
    expires: str | None  # seconds, presigned URLs only


# A presigned URL's query parameters, in the order of _Claim's fields.
_QUERY_FIELDS = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Date",
    "X-Amz-Expires",
)


def verify(
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes | None,
    secrets: Mapping[str, str],
    *,
    now: float,
    max_skew: float = 300.0,
    service: str = "sqs",
) -> str:
    """Return the access key id that signed the request, or raise ``SqsError``.

    ``path`` and ``query`` are as received, still percent-encoded; header names
    may come in any case. A signature in the ``Authorization`` header must be
    made within ``max_skew`` seconds of ``now``; a presigned URL is good from
    ``max_skew`` seconds before its ``X-Amz-Date`` until ``X-Amz-Expires``
    seconds after it. Any region is accepted; the scope's service must be
    ``service``.

    ``body`` None checks the signature before the body is read: the payload
    hash signed is the ``x-amz-content-sha256`` header's, which the request
    must have (``ValueError`` if not); the body must then be checked against
    it with ``check_payload``.
    """
    fields: dict[str, list[str]] = {}
    for name, value in headers.items():
        fields.setdefault(name.lower(), []).append(value)
    params = _query_params(query)
    claim = _claim(fields, params)
    if claim.algorithm != ALGORITHM:
        raise SqsError("IncompleteSignature", f"Unsupported AWS 'algorithm': {claim.algorithm!r}.")
    scope = claim.credential.split("/")
    if len(scope) != 5 or not all(scope):
        raise SqsError(
            "IncompleteSignature", f"Credential is not <key id>/<date>/<region>/<service>/{TERMINATOR}."
        )
    key_id, scope_date, region, scope_service, terminator = scope
    if terminator != TERMINATOR:
        raise SqsError(
            "IncompleteSignature",
            f"Credential should be scoped with a valid terminator: {TERMINATOR!r}, not {terminator!r}.",
        )
    if scope_service != service:
        raise SqsError(
            "SignatureDoesNotMatch", f"Credential should be scoped to correct service: {service!r}."
        )
    signed_names = claim.signed_headers.split(";")
    if "host" not in signed_names:
        raise SqsError("IncompleteSignature", "'Host' must be a 'SignedHeader' in the AWS Authorization.")
    secret = secrets.get(key_id)
    if secret is None:
        raise SqsError("InvalidClientTokenId", "The security token included in the request is invalid.")
    signed_at = _epoch(claim.amz_date)
    if scope_date != claim.amz_date[:8]:
        raise SqsError(
            "SignatureDoesNotMatch",
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
            f"{scope_date!r} != {claim.amz_date[:8]!r}, from {claim.amz_date!r}.",
        )
    _check_time(signed_at, claim.expires, now, max_skew)

    payload = _joined(fields, "x-amz-content-sha256")
    if body is None:
        if payload is None:
            raise ValueError("without its body, a request is verified by its x-amz-content-sha256 header")
    elif payload is None:
        payload = hashlib.sha256(body).hexdigest()
    else:
        _check_payload(payload, body)
    presigned = claim.expires is not None
    canonical_request = "\n".join(
        (
            method.upper(),
            _canonical_uri(path),
            _canonical_query(params, presigned),
            "".join(f"{name}:{_trimmed(fields.get(name, []))}\n" for name in signed_names),
            claim.signed_headers,
            payload,
        )
    )
    credential_scope = "/".join(scope[1:])
    string_to_sign = "\n".join(
        (ALGORITHM, claim.amz_date, credential_scope, hashlib.sha256(canonical_request.encode()).hexdigest())
    )
    key = signing_key(secret, scope_date, region, scope_service)
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    # Bytes, not str: compare_digest refuses non-ASCII text, and the signature is the sender's.
    if not hmac.compare_digest(expected.encode(), claim.signature.encode()):
        raise SqsError("SignatureDoesNotMatch", _MISMATCH)
    return key_id


# Derived signing keys: four HMACs per request saved; a key is the same all day for one secret,
# region and service. Keyed by the secret itself, so another secret never finds a stale key.
_SIGNING_KEYS: dict[tuple[str, str, str, str], bytes] = {}
_MAX_SIGNING_KEYS = 1024


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The SigV4 signing key of ``secret`` for a day (YYYYMMDD), region and service."""
    cached = (secret, date, region, service)
    key = _SIGNING_KEYS.get(cached)
    if key is None:
        key = f"AWS4{secret}".encode()
        for part in (date, region, service, TERMINATOR):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        if len(_SIGNING_KEYS) >= _MAX_SIGNING_KEYS:
            _SIGNING_KEYS.clear()
        _SIGNING_KEYS[cached] = key
    return key


def check_payload(headers: Mapping[str, str], body: bytes) -> None:
    """Raise ``SqsError`` unless ``body`` has the hash the ``x-amz-content-sha256`` header gives.

    ``UNSIGNED-PAYLOAD`` (or no such header) accepts any body.
    """
    fields: dict[str, list[str]] = {}
    for name, value in headers.items():
        fields.setdefault(name.lower(), []).append(value)
    payload = _joined(fields, "x-amz-content-sha256")
    if payload is not None:
        _check_payload(payload, body)


def _check_payload(payload: str, body: bytes) -> None:
    if payload != UNSIGNED_PAYLOAD and payload != hashlib.sha256(body).hexdigest():
        raise SqsError(
            "SignatureDoesNotMatch", "The x-amz-content-sha256 header does not match what was computed."
        )


def scope_region(headers: Mapping[str, str], query: str) -> str | None:
    """The region of a request's credential scope, signature checked or not; None if it has none.

    From the ``Authorization`` header's ``Credential=<key>/<date>/<region>/...``,
    else from a presigned URL's ``X-Amz-Credential``.
    """
    credential = None
    getall = getattr(headers, "getall", None)  # a multidict's: no walk through every header
    values = getall("Authorization", ()) if getall is not None else _values(headers, "authorization")
    for value in values:
        for item in value.strip().partition(" ")[2].split(","):
            field, _, text = item.strip().partition("=")
            if field == "Credential":
                credential = text
    if credential is None:
        for raw_name, raw_value in _query_params(query):
            if raw_name == b"X-Amz-Credential":
                credential = raw_value.decode(errors="replace")
    scope = credential.split("/") if credential else []
    return scope[2] if len(scope) == 5 and scope[2] else None


def _values(headers: Mapping[str, str], lowered: str) -> list[str]:
    """The values of the headers named ``lowered`` in any case, in order."""
    return [value for name, value in headers.items() if name.lower() == lowered]


def _claim(fields: dict[str, list[str]], params: list[tuple[bytes, bytes]]) -> _Claim:
    """The signature fields, from the Authorization header or else the presigned URL's query."""
    authorization = _joined(fields, "authorization")
    if authorization is not None:
        algorithm, _, rest = authorization.strip().partition(" ")
        parts: dict[str, str] = {}
        for item in rest.split(","):
            name, _, value = item.strip().partition("=")
            parts[name] = value
        missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not parts.get(name)]
        if missing:
            required = " ".join(f"Authorization header requires {name!r} parameter." for name in missing)
            raise SqsError("IncompleteSignature", f"{required} Authorization={authorization}")
        return _Claim(
            algorithm,
            parts["Credential"],
            parts["SignedHeaders"],
            parts["Signature"],
            _header_date(fields),
            None,
        )
    named = {name.decode(errors="replace"): value.decode(errors="replace") for name, value in params}
    if not {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"} & named.keys():
        raise SqsError("MissingAuthenticationToken", "Request is missing Authentication Token")
    missing = [name for name in _QUERY_FIELDS if not named.get(name)]
    if missing:
        raise SqsError("IncompleteSignature", f"AWS query-string parameters missing: {', '.join(missing)}.")
    return _Claim(*(named[name] for name in _QUERY_FIELDS))


def _header_date(fields: dict[str, list[str]]) -> str:
    amz_date = _joined(fields, "x-amz-date")
    if amz_date is not None:
        return amz_date
    date = _joined(fields, "date")
    try:
        parsed = parsedate_to_datetime(date or "")
    except (TypeError, ValueError):
        raise SqsError(
            "IncompleteSignature",
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
        ) from None
    if parsed.tzinfo is None:  # "-0000": UTC, source unknown
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc).strftime(_AMZ_DATE_FORMAT)


def _epoch(amz_date: str) -> float:
    try:
        if not _AMZ_DATE.fullmatch(amz_date):
            raise ValueError(amz_date)
        # Fixed-width digits: what strptime with _AMZ_DATE_FORMAT reads, without its cost.
        day, time = amz_date[:8], amz_date[9:15]
        signed = datetime(
            int(day[:4]),
            int(day[4:6]),
            int(day[6:]),
            int(time[:2]),
            int(time[2:4]),
            int(time[4:]),
            tzinfo=timezone.utc,
        )
        return signed.timestamp()
    except ValueError:
        raise SqsError("IncompleteSignature", f"Date {amz_date!r} is not YYYYMMDDTHHMMSSZ.") from None


def _check_time(signed_at: float, expires: str | None, now: float, max_skew: float) -> None:
    skew = f"{max_skew / 60:g} min."
    if signed_at > now + max_skew:
        raise SqsError(
            "RequestExpired",
            f"Signature not yet current: {_stamp(signed_at)} is still later than "
            f"{_stamp(now + max_skew)} ({_stamp(now)} + {skew})",
        )
    if expires is None:
        if signed_at < now - max_skew:
            raise SqsError(
                "RequestExpired",
                f"Signature expired: {_stamp(signed_at)} is now earlier than "
                f"{_stamp(now - max_skew)} ({_stamp(now)} - {skew})",
            )
        return
    if not (expires.isascii() and expires.isdigit() and len(expires) <= 12):
        raise SqsError("IncompleteSignature", f"X-Amz-Expires {expires!r} is not a number of seconds.")
    if int(expires) > MAX_EXPIRES_SECONDS:
        raise SqsError("RequestExpired", f"X-Amz-Expires must be at most {MAX_EXPIRES_SECONDS} seconds.")
    if now > signed_at + int(expires):
        raise SqsError(
            "RequestExpired", f"Request has expired: {_stamp(signed_at)} + {expires} s < {_stamp(now)}."
        )


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime(_AMZ_DATE_FORMAT)


def _joined(fields: dict[str, list[str]], name: str) -> str | None:
    values = fields.get(name)
    return None if values is None else ",".join(values)


def _trimmed(values: list[str]) -> str:
    return ",".join(" ".join(value.split()) for value in values)


def _query_params(query: str) -> list[tuple[bytes, bytes]]:
    """Names and values decoded; "+" is a space, as in the form encoding botocore puts in URLs."""
    params = []
    for item in query.split("&"):
        if item:
            name, _, value = item.replace("+", " ").partition("=")
            params.append((unquote_to_bytes(name), unquote_to_bytes(value)))
    return params


def _canonical_query(params: list[tuple[bytes, bytes]], presigned: bool) -> str:
    encoded = sorted(
        (quote(name, safe="-_.~"), quote(value, safe="-_.~"))
        for name, value in params
        if not (presigned and name == b"X-Amz-Signature")
    )
    return "&".join(f"{name}={value}" for name, value in encoded)


def _canonical_uri(path: str) -> str:
    """The path without empty and dot segments, percent-encoded once more.

    Non-S3 services sign the path as sent encoded again: "%20" in the request
    line is "%2520" in the canonical request.
    """
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    normalised = "/" + "/".join(segments) + ("/" if segments and path.endswith("/") else "")
    return quote(normalised, safe="/~")
