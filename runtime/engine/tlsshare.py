"""One OpenSSL certificate and key per generated certificate, shared by every connection
that presents it (issue 26, D161).

mitmproxy's TlsConfig hands each client-side TLS connection its certificate as
`cryptography` objects (`use_certificate(entry.cert.to_cryptography())`,
`use_privatekey(entry.privatekey)`), and pyOpenSSL converts them on every call: the
certificate to DER and back into a new OpenSSL `X509`, the key into a new `EVP_PKEY`. So
each idle intercepted connection held its own copy of both (about 13 KiB), and each
handshake paid the two conversions. `share_certificates()` replaces those two methods of
`SSL.Connection` with ones that convert a given `cryptography` object once and hand
OpenSSL the same `X509` / `EVP_PKEY` afterwards; OpenSSL counts references, as it does for
the certificate of an `SSL_CTX` that all its connections share. A client sees the same
certificate bytes; nothing else changes.

Invariants: a cached conversion holds the `cryptography` object it was made from, so that
object's id cannot be reused while it is cached; at most `CACHED` conversions of each kind
are kept, as many as mitmproxy's certificate store keeps certificates (so the cache never
holds a certificate alive that the store has dropped for long), the least recently used
dropped first; a pyOpenSSL object (not a `cryptography` one) takes pyOpenSSL's own path;
when OpenSSL refuses a shared object, pyOpenSSL's own method runs and raises its error.
tests/proxy/test_tlsshare.py pins the pyOpenSSL methods this replaces.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from cryptography import x509
from mitmproxy import certs
from OpenSSL import SSL, crypto
from OpenSSL._util import lib as _ssl_lib

CACHED = certs.CertStore.STORE_CAP  # 100 in mitmproxy 12

# pyOpenSSL's methods, for what is not a cryptography object and for its errors.
ORIGINAL_USE_CERTIFICATE = SSL.Connection.use_certificate
ORIGINAL_USE_PRIVATEKEY = SSL.Connection.use_privatekey


class Converted:
    """`convert(made)`, computed once per object `made` (by identity), least recently used
    dropped past `limit`."""

    def __init__(self, convert: Callable[[Any], Any], limit: int = CACHED) -> None:
        self._convert, self._limit = convert, limit
        self._found: OrderedDict[int, tuple[Any, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._found)

    def __call__(self, made: Any) -> Any:
        key = id(made)
        hit = self._found.get(key)
        if hit is not None and hit[0] is made:
            self._found.move_to_end(key)
            return hit[1]
        converted = self._convert(made)
        self._found[key] = (made, converted)
        if len(self._found) > self._limit:
            self._found.popitem(last=False)
        return converted


certificates = Converted(crypto.X509.from_cryptography)
private_keys = Converted(crypto.PKey.from_cryptography_key)


def _use_certificate(self: SSL.Connection, cert: Any) -> None:
    if not isinstance(cert, x509.Certificate):
        return ORIGINAL_USE_CERTIFICATE(self, cert)
    if _ssl_lib.SSL_use_certificate(self._ssl, certificates(cert)._x509) != 1:
        ORIGINAL_USE_CERTIFICATE(self, cert)
    return None


def _use_privatekey(self: SSL.Connection, pkey: Any) -> None:
    if isinstance(pkey, crypto.PKey):
        return ORIGINAL_USE_PRIVATEKEY(self, pkey)
    if _ssl_lib.SSL_use_PrivateKey(self._ssl, private_keys(pkey)._pkey) != 1:
        ORIGINAL_USE_PRIVATEKEY(self, pkey)
    return None


def share_certificates() -> None:
    """From now on, `SSL.Connection` shares converted certificates and keys (idempotent)."""
    SSL.Connection.use_certificate = _use_certificate  # type: ignore[method-assign]
    SSL.Connection.use_privatekey = _use_privatekey  # type: ignore[method-assign]
