"""Console sessions: a signed, expiring cookie issued after a sign-in, and the CSRF tokens of forms.

With access keys, a session is issued to whoever gives an access key id and its secret, and is
signed with that secret: removing or changing the key ends its sessions, and every `smq serve`
with the same keys accepts them. Without keys (a server on a loopback address, or one started
with ``--no-auth``) anyone reaching the server may use the console, as the API; its sessions then
only carry the CSRF token, signed with a secret of this process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

COOKIE = "smq_console"
SESSION_SECONDS = 8 * 3600
_VERSION = "v1"


@dataclass(frozen=True)
class Session:
    """A console session: who signed in ('' without keys), until when, and its own random part."""

    key_id: str
    expires: int
    nonce: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _cookie(session: Session, mac: str) -> str:
    """The cookie of a session, in the one form it is issued in."""
    return ".".join((_VERSION, _b64(session.key_id.encode()), str(session.expires), session.nonce, mac))


class Sessions:
    """Issues and checks console session cookies and CSRF tokens for one server's access keys."""

    def __init__(self, access_keys: Mapping[str, str], now: Callable[[], float] = time.time) -> None:
        self._keys = access_keys
        self._now = now
        self._own_secret = secrets.token_bytes(32)  # signs sessions when there are no keys

    @property
    def signs_in(self) -> bool:
        """True when the console asks for an access key (the server has keys)."""
        return bool(self._keys)

    def sign_in(self, key_id: str, secret: str) -> str | None:
        """A new session cookie for this access key, or None if the id or the secret is wrong."""
        expected = self._keys.get(key_id)
        # Compare even for an unknown id, so that the time taken does not tell which ids exist.
        matches = hmac.compare_digest(secret.encode(), (expected or "\0" + secret).encode())
        if expected is None or not matches:
            return None
        return self._issue(key_id)[1]

    def anonymous(self) -> tuple[Session, str]:
        """A new session, and its cookie, for a server without keys."""
        if self._keys:
            raise ValueError("a server with access keys has no anonymous sessions")
        return self._issue("")

    def session(self, cookie: str | None) -> Session | None:
        """The session of a cookie, or None if it is missing, altered, expired or its key is gone."""
        if not cookie:
            return None
        parts = cookie.split(".")
        if len(parts) != 5 or parts[0] != _VERSION:
            return None
        _, key_text, expires_text, nonce, mac = parts
        try:
            key_id = _unb64(key_text).decode()
            expires = int(expires_text)
        except ValueError:
            return None
        if bool(key_id) != bool(self._keys):
            return None
        secret = self._secret(key_id)
        if secret is None:
            return None
        session = Session(key_id, expires, nonce)
        if not hmac.compare_digest(mac, self._mac(secret, session)):
            return None
        if cookie != _cookie(session, mac):
            # Only the form this server issues: int() and base64 also take other spellings
            # (" 9", "+9", "０９", stray characters), which would make one session many cookies.
            return None
        if expires <= self._now():
            return None
        return session

    def csrf_token(self, session: Session) -> str:
        """The token that forms of this session carry; a change without it is refused."""
        secret = self._secret(session.key_id)
        if secret is None:
            raise ValueError("the session's access key is gone")
        return _b64(hmac.new(secret, f"csrf|{session.nonce}".encode(), hashlib.sha256).digest())

    def check_csrf(self, session: Session, token: str | None) -> bool:
        """True if ``token`` is this session's CSRF token."""
        return bool(token) and hmac.compare_digest(token or "", self.csrf_token(session))

    def _issue(self, key_id: str) -> tuple[Session, str]:
        session = Session(key_id, int(self._now()) + SESSION_SECONDS, _b64(secrets.token_bytes(18)))
        secret = self._secret(key_id)
        assert secret is not None
        return session, _cookie(session, self._mac(secret, session))

    def _secret(self, key_id: str) -> bytes | None:
        if not key_id:
            return self._own_secret
        secret = self._keys.get(key_id)
        return None if secret is None else ("smq-console|" + secret).encode()

    @staticmethod
    def _mac(secret: bytes, session: Session) -> str:
        message = f"session|{session.key_id}|{session.expires}|{session.nonce}".encode()
        return _b64(hmac.new(secret, message, hashlib.sha256).digest())
