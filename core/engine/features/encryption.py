"""Encrypted payloads, results and logs at rest (a queue's `encrypt` setting).

AES-256-GCM (the `cryptography` package, `pip install queueadmin[encryption]`)
with keys from settings: ``QUEUEADMIN["ENCRYPTION_KEYS"]`` (or the environment
variable ``QUEUEADMIN_ENCRYPTION_KEYS``, comma separated), newest first. New
writes use the first key; reads try the key the text names, then each other.

A sealed text is ASCII::

    !e1:<key id>:<base64url(nonce 12 bytes || ciphertext || tag 16 bytes)>

JSON text never starts with "!", so one character tells a sealed payload from
a clear one: a queue without encryption pays one string test per item. The
key id is the first 8 hex digits of a hash of the key (it names the key, it
does not reveal it). The associated data binds a sealed text to what it is
(a payload, a result, a log), so a sealed log cannot be passed off as a
result; it does not bind it to its request (readers of a stream entry do not
always know the request at hand; the Redis keys are the trust boundary).

Result records keep their JSON shape (status, attempts, started_at, ...)
which the Lua scripts read: only the values are sealed (`result`, `log`,
`error`, `traceback`: SEALED_FIELDS; an error can quote its item), and the
record says so with ``"enc": 1``. The dead-letter search opens each record
it reads. Re-sealing under a newer key: features/reencrypt.py.

De-duplication of an encrypted queue hashes with HMAC-SHA256 under a key
derived from the newest key (`dedup_key`), never a plain hash of the clear
text.

Django-free: the web process, the client and the worker share one keyring
through `keyring()`, which reads the keys from Django's settings when Django
is set up, else from the environment; `install(ring)` fixes one (tests, or an
embedding program).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import sys
import threading
from collections.abc import Iterable
from typing import Any

from queueadmin.core.engine.errors import QueueError

MARK = "!"  # the first character of a sealed text (never of JSON)
PREFIX = "!e1:"
ENV = "QUEUEADMIN_ENCRYPTION_KEYS"
KEY_BYTES = 32
NONCE_BYTES = 12
# what a sealed text holds, bound into its associated data
PAYLOAD, RESULT, LOG, ERROR, TRACE = "p", "r", "l", "e", "t"
# a result record's sealed members, and what each holds
SEALED_FIELDS = (("result", RESULT), ("log", LOG), ("error", ERROR), ("traceback", TRACE))
NO_KEY = "(encrypted: no key)"  # what a reader shows for a text no configured key opens
_AD = "queueadmin/1/"


class EncryptionError(QueueError):
    """A clear error: no key configured, a malformed key, or a sealed text
    that no configured key opens (wrong key, or damaged)."""


def parse_key(text: str | bytes) -> bytes:
    """A 32-byte key from its base64 (standard or URL-safe) or hex form."""
    if isinstance(text, bytes) and len(text) == KEY_BYTES:
        return text
    raw = text.decode("ascii", "replace") if isinstance(text, bytes) else str(text)
    raw = raw.strip()
    candidates = []
    if len(raw) == 2 * KEY_BYTES:
        try:
            candidates.append(bytes.fromhex(raw))
        except ValueError:
            pass
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            candidates.append(decode(raw + "=" * (-len(raw) % 4)))
        except (binascii.Error, ValueError):
            pass
    for key in candidates:
        if len(key) == KEY_BYTES:
            return key
    raise EncryptionError("an encryption key must be 32 bytes, written in base64 or hex "
                          "(make one with: python -c \"import os,base64;"
                          "print(base64.b64encode(os.urandom(32)).decode())\")")


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"queueadmin key id\x00" + key).hexdigest()[:8]


def _aesgcm(key: bytes):
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - an install without the extra
        raise EncryptionError("encrypted queues need the cryptography package "
                              "(pip install 'queueadmin[encryption]')") from None
    return AESGCM(key)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Keyring:
    """Keys newest first: `seal` with the first, `unseal` with the one named, else any."""

    def __init__(self, keys: Iterable[str | bytes]):
        raw = [parse_key(k) for k in keys]
        if not raw:
            raise EncryptionError("an encryption keyring needs at least one key")
        self.keys: list[tuple[str, Any]] = []
        seen = set()
        for key in raw:
            kid = key_id(key)
            if kid not in seen:
                seen.add(kid)
                self.keys.append((kid, _aesgcm(key)))
        self._by_id = dict(self.keys)
        from cryptography.exceptions import InvalidTag  # importable: _aesgcm succeeded

        self._invalid = InvalidTag
        self.primary = self.keys[0][0]
        self._dedup = hmac.new(raw[0], b"queueadmin de-dup key", hashlib.sha256).digest()

    @property
    def ids(self) -> list[str]:
        return [kid for kid, _ in self.keys]

    def seal(self, text: str, purpose: str = PAYLOAD) -> str:
        kid, aead = self.keys[0]
        nonce = os.urandom(NONCE_BYTES)
        sealed = aead.encrypt(nonce, text.encode("utf-8", "surrogatepass"), (_AD + purpose).encode())
        return f"{PREFIX}{kid}:{_b64(nonce + sealed)}"

    def unseal(self, text: str, purpose: str = PAYLOAD) -> str:
        if not isinstance(text, str) or not text.startswith(PREFIX):
            raise EncryptionError("not an encrypted text")
        kid, sep, body = text[len(PREFIX):].partition(":")
        try:
            blob = _unb64(body) if sep and body.isascii() else b""
        except (binascii.Error, ValueError):
            blob = b""
        if len(blob) < NONCE_BYTES + 16:
            raise EncryptionError("a damaged encrypted text")
        first = self._by_id.get(kid)
        order = ([first] if first is not None else []) + [a for k, a in self.keys if k != kid]
        ad = (_AD + purpose).encode()
        for aead in order:
            try:
                clear = aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], ad)
            except self._invalid:
                continue
            try:
                return clear.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                raise EncryptionError("a damaged encrypted text") from None
        raise EncryptionError(f"no configured encryption key opens this text (sealed with key {kid[:8]!r}; "
                              f"configured: {', '.join(self.ids)})")

    def sealed_with(self, text: str) -> str | None:
        """The key id a sealed text names (None: not sealed)."""
        if isinstance(text, str) and text.startswith(PREFIX):
            return text[len(PREFIX):].partition(":")[0]
        return None

    def is_stale(self, text: str) -> bool:
        """Sealed, and not with the newest key (what re-encryption rewrites)."""
        kid = self.sealed_with(text)
        return kid is not None and kid != self.primary

    def dedup_key(self, processor: str, payloads: list[str]) -> str:
        """The default de-dup key of an encrypted queue: HMAC-SHA256 of the
        processor and clear payloads under a key derived from the newest key."""
        h = hmac.new(self._dedup, processor.encode(), hashlib.sha256)
        for p in payloads:
            h.update(b"\n")
            h.update(p.encode("utf-8", "surrogatepass"))
        return "h1:" + h.hexdigest()


# -- the process's keyring ------------------------------------------------------

_lock = threading.Lock()
_installed: Keyring | None = None
_cache: tuple[tuple, Keyring | None] = ((), None)


def install(ring: Keyring | None) -> None:
    """Fix this process's keyring (None: read the settings again at each use)."""
    global _installed
    _installed = ring


def configured_keys() -> list[str]:
    """The keys the settings give: QUEUEADMIN["ENCRYPTION_KEYS"] when Django
    is set up and has it, else the environment's QUEUEADMIN_ENCRYPTION_KEYS."""
    conf = sys.modules.get("django.conf")
    if conf is not None:
        try:
            if conf.settings.configured:
                found = (getattr(conf.settings, "QUEUEADMIN", None) or {}).get("ENCRYPTION_KEYS")
                if found:
                    return [found] if isinstance(found, (str, bytes)) else list(found)
        except Exception:  # noqa: BLE001, S110 (settings that cannot be read: the environment's keys)
            pass
    return [k.strip() for k in os.environ.get(ENV, "").split(",") if k.strip()]


def keyring() -> Keyring | None:
    """The keyring in use, None when no key is configured. Built once per set of keys."""
    global _cache
    if _installed is not None:
        return _installed
    keys = tuple(configured_keys())
    if not keys:
        return None
    cached_keys, ring = _cache
    if cached_keys != keys:
        with _lock:
            ring = Keyring(keys)
            _cache = (keys, ring)
    return ring


def require() -> Keyring:
    ring = keyring()
    if ring is None:
        raise EncryptionError("this queue encrypts its items, but no encryption key is configured "
                              "(QUEUEADMIN[\"ENCRYPTION_KEYS\"] or QUEUEADMIN_ENCRYPTION_KEYS)")
    return ring


def is_sealed(text) -> bool:
    return isinstance(text, str) and text[:1] == MARK


def seal(text: str, purpose: str = PAYLOAD) -> str:
    return require().seal(text, purpose)


def opened(text: str, purpose: str = PAYLOAD) -> str:
    """The clear text of a payload as stored: as it is when clear (one
    character test), else unsealed (EncryptionError when no key opens it)."""
    if text[:1] != MARK:
        return text
    return require().unseal(text, purpose)


def readable(text, purpose: str = PAYLOAD):
    """For display: the clear text, or None when no configured key opens it."""
    if not is_sealed(text):
        return text
    try:
        return require().unseal(text, purpose)
    except EncryptionError:
        return None


def payload_value(text):
    """A stored payload as a JSON value for display; NO_KEY (a string) when
    no configured key opens it."""
    clear = readable(text, PAYLOAD)
    if clear is None:
        return NO_KEY
    return json.loads(clear)


def open_record(record: dict) -> dict:
    """A result record as stored -> as read: its sealed `result` (JSON text),
    `log`, `error` and `traceback` opened; NO_KEY in their place when no key
    opens them. The `enc` mark goes (readers see an unencrypted queue's record)."""
    if not isinstance(record, dict) or not record.pop("enc", None):
        return record
    for field, purpose in SEALED_FIELDS:
        if is_sealed(record.get(field)):
            clear = readable(record[field], purpose)
            if clear is not None and field == "result":
                try:
                    clear = json.loads(clear)
                except ValueError:
                    clear = None
            record[field] = NO_KEY if clear is None else clear
    return record


def seal_line(line: str) -> str:
    """An attempt line (attempts.py) with its error's first line (`y`) sealed."""
    try:
        entry = json.loads(line)
        if entry.get("y"):
            entry["y"] = seal(entry["y"], ERROR)
    except EncryptionError as exc:
        entry["y"] = f"(not stored: {exc})"
    except (ValueError, AttributeError):
        return line
    return json.dumps(entry, separators=(",", ":"))


def open_line(entry: dict) -> dict:
    """An attempt line as read: its sealed `y` opened (NO_KEY when no key opens it)."""
    if is_sealed(entry.get("y")):
        clear = readable(entry["y"], ERROR)
        entry["y"] = NO_KEY if clear is None else clear
    return entry


def reseal_lines(raw: str, ring: Keyring) -> str | None:
    """An item's stored attempt lines with stale sealed errors sealed again
    under the newest key; None when nothing changes."""
    out, changed = [], False
    for text in raw.split("\n"):
        try:
            entry = json.loads(text)
        except ValueError:
            entry = None
        y = entry.get("y") if isinstance(entry, dict) else None
        if isinstance(y, str) and ring.is_stale(y):
            entry["y"] = ring.seal(ring.unseal(y, ERROR), ERROR)
            text, changed = json.dumps(entry, separators=(",", ":")), True
        out.append(text)
    return "\n".join(out) if changed else None


def reseal_record(raw: str, ring: Keyring) -> str | None:
    """A stored record with its stale sealed values sealed again under the
    newest key; None when it has nothing to rewrite."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict) or not record.get("enc"):
        return None
    changed = False
    for field, purpose in SEALED_FIELDS:
        value = record.get(field)
        if isinstance(value, str) and ring.is_stale(value):
            record[field] = ring.seal(ring.unseal(value, purpose), purpose)
            changed = True
    return json.dumps(record, separators=(",", ":")) if changed else None


def default_dedup_key(processor: str, payloads: list[str]) -> str:
    return require().dedup_key(processor, payloads)


def seal_all(payloads: list[str]) -> list[str]:
    """Payloads (JSON texts) sealed for an encrypted queue; EncryptionError
    before anything is written when no key is configured."""
    ring = require()
    return [ring.seal(p, PAYLOAD) for p in payloads]


def problem() -> str:
    """Why an encrypted queue cannot work now ("" when it can): no key
    configured, a malformed key, or no cryptography package."""
    try:
        if keyring() is None:
            return ("No encryption key is configured: set QUEUEADMIN[\"ENCRYPTION_KEYS\"] (or the environment's "
                    "QUEUEADMIN_ENCRYPTION_KEYS) on every machine first (docs/configuration.md).")
    except EncryptionError as exc:
        return f"ENCRYPTION_KEYS: {exc}"
    return ""
