"""Webhooks: a request's `callback_url` is sent its summary when it finishes.

* Targets (`check_target`): http or https only, no credentials in the URL.
  When QUEUEADMIN["WEBHOOK_ALLOWED_HOSTS"] is set, the host must be in it;
  and every address the host resolves to must be public (not private,
  loopback, link-local, shared, multicast, reserved or unspecified) unless
  a network of the allow-list holds it. Checked at submission (a form error,
  a command error, a 400) and again before each attempt, whose connection
  then goes to an address just checked (no second lookup: DNS rebinding).
  Host names are matched before anything is resolved.
* Signing: HMAC-SHA256 over the exact body with the submitting API token's
  `webhook_secret`, or the site's QUEUEADMIN["WEBHOOK_SECRET"] for requests
  submitted from the dashboard, `queue_submit` or Python.
* Delivery: made durable in Redis when the request finishes
  (core/webhooks/deliveries.py) or is cancelled, see
  core/engine/features/webhook_store.py; sent by core/webhooks/sender.py, a
  thread of each worker process.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from django.conf import settings

from queueadmin.core import conf
from queueadmin.core.models import ApiToken

MAX_URL_CHARS = 2000
SIGNATURE_HEADER = "X-Queueadmin-Signature"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(ValueError):
    """The URL may not be a webhook target; the message says why, for people."""


class Unresolved(Refused):
    """The host did not resolve (at delivery: tried again later)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # ASCII (IDNA); an IP address without brackets
    port: int
    path: str  # path and query, as sent
    addresses: tuple[str, ...]  # every address of the host, each checked


# -- the allow-list ------------------------------------------------------------------


@dataclass(frozen=True)
class AllowList:
    any_host: bool
    names: frozenset[str]  # exact host names
    suffixes: tuple[str, ...]  # ".example.com" from "*.example.com" or ".example.com"
    networks: tuple[Network, ...]  # IP addresses and networks, private ones included

    @classmethod
    def from_settings(cls) -> "AllowList":
        entries = [str(e).strip().lower() for e in conf.get("WEBHOOK_ALLOWED_HOSTS") or [] if str(e).strip()]
        names, suffixes, networks = set(), [], []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith(("*.", ".")):
                suffixes.append("." + entry.lstrip("*."))
            elif entry != "*":
                names.add(entry.rstrip("."))
        return cls(any_host=not entries or "*" in entries, names=frozenset(names), suffixes=tuple(suffixes),
                   networks=tuple(networks))

    def host_allowed(self, host: str, literal: Address | None) -> bool:
        if self.any_host:
            return True
        if literal is not None:
            return any(literal in net for net in self.networks if net.version == literal.version)
        return host in self.names or host.endswith(self.suffixes)

    def address_problem(self, ip: Address) -> str | None:
        """Why this address may not be connected to, or None."""
        if any(ip in net for net in self.networks if net.version == ip.version):
            return None
        return private_kind(ip)


def private_kind(ip: Address) -> str | None:
    """What makes an address non-public (None: a public address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in (ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())):
            if inner is not None and private_kind(inner):
                return private_kind(inner)
    for kind in ("loopback", "link_local", "private", "multicast", "reserved", "unspecified"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if ip.is_global else "special-purpose"


# -- checking a URL -------------------------------------------------------------------


def check_target(url, resolve: bool = True) -> Target:
    """The target of `url` with its checked addresses, or Refused."""
    scheme, host, port, path = parse(url)
    literal = _literal(host)
    allow = AllowList.from_settings()
    if not allow.host_allowed(host, literal):
        raise Refused(f"host {host} is not allowed for webhooks (QUEUEADMIN_WEBHOOK_ALLOWED_HOSTS)")
    addresses = [literal] if literal is not None else (_resolve(host, port) if resolve else [])
    for ip in addresses:
        kind = allow.address_problem(ip)
        if kind:
            shown = host if literal is not None else f"{host} ({ip})"
            raise Refused(f"{shown} is not a public address ({kind}): not allowed for webhooks unless its "
                          "network is in QUEUEADMIN_WEBHOOK_ALLOWED_HOSTS")
    return Target(scheme, host, port, path, tuple(str(ip) for ip in addresses))


def parse(url) -> tuple[str, str, int, str]:
    """(scheme, ASCII host, port, path and query), or Refused."""
    if not isinstance(url, str) or not url:
        raise Refused("the callback URL must be a non-empty string")
    if len(url) > MAX_URL_CHARS:
        raise Refused(f"the callback URL is too long (at most {MAX_URL_CHARS} characters)")
    if any(c <= " " or c == "\x7f" or "\ud800" <= c <= "\udfff" for c in url):
        raise Refused("the callback URL holds spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"the callback URL is malformed ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused("the callback URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise Refused("the callback URL may not hold a user name or password")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise Refused("the callback URL has no host")
    if port == 0:
        raise Refused("the callback URL's port must be 1-65535")
    if "%" in host:
        raise Refused("the callback URL's host may not name a network interface (%)")
    if _literal(host) is None:
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise Refused("the callback URL's host is not a valid host name") from None
        if not all(c.isalnum() or c in "-._" for c in host):
            raise Refused("the callback URL's host is not a valid host name")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    # non-ASCII in the path or query is sent percent-encoded (UTF-8)
    path = quote(path, safe="!#$%&'()*+,/:;=?@[]~")
    return scheme, host, port or (443 if scheme == "https" else 80), path


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _resolve(host: str, port: int) -> list[Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Unresolved(f"cannot resolve host {host} ({exc.__class__.__name__})") from None
    out = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(sockaddr[0].partition("%")[0])
        if ip not in out:
            out.append(ip)
    if not out:
        raise Unresolved(f"host {host} has no address")
    return out


def refusal(url) -> str | None:
    """Why `url` may not be a callback URL (for forms and commands), or None."""
    try:
        check_target(url)
    except Refused as exc:
        return str(exc)
    return None


# -- signing --------------------------------------------------------------------------


def site_secret() -> str:
    return str(conf.get("WEBHOOK_SECRET") or settings.SECRET_KEY)


def signer_secret(signer: str) -> str | None:
    """The secret of a delivery's signer ("" the site, "token:N" an API
    token); None when the token was deleted (or has no secret)."""
    if not signer:
        return site_secret()
    kind, _, pk = signer.partition(":")
    if kind != "token" or not pk.isdigit():
        return None
    return ApiToken.objects.filter(pk=int(pk)).values_list("webhook_secret", flat=True).first() or None


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def token_signer(token) -> str:
    """The signer of a request an API token submits; Refused for a token
    issued before webhooks (it has no secret to sign with)."""
    if not token.webhook_secret:
        raise Refused("this API token has no webhook secret (it was issued before webhooks existed): "
                      "issue a new token to use callback_url")
    return f"token:{token.pk}"
