"""The connections presenting one certificate share one OpenSSL copy of it and its key (D161)."""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from OpenSSL import SSL, crypto
from OpenSSL._util import ffi, lib

from sandbox_egress.runtime.engine import tlsshare
from testbed.testca import self_signed


def test_the_pyopenssl_methods_it_replaces() -> None:
    """pyOpenSSL converts a cryptography object on every call, then hands it to OpenSSL."""
    certificate = inspect.getsource(tlsshare.ORIGINAL_USE_CERTIFICATE)
    assert "X509.from_cryptography(cert)" in certificate
    assert "_lib.SSL_use_certificate(self._ssl, cert._x509)" in certificate
    key = inspect.getsource(tlsshare.ORIGINAL_USE_PRIVATEKEY)
    assert "PKey.from_cryptography_key(pkey)" in key
    assert "_lib.SSL_use_PrivateKey(self._ssl, pkey._pkey)" in key


def make_certificate() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    return self_signed("shared.test")


def presented(cert: x509.Certificate, key: Any) -> tuple[SSL.Connection, x509.Certificate]:
    """A server connection given `cert` and `key` after an in-memory handshake with a
    client, and the certificate the client received."""
    server = SSL.Connection(SSL.Context(SSL.TLS_SERVER_METHOD), None)
    server.use_certificate(cert)
    server.use_privatekey(key)
    server.set_accept_state()
    client = SSL.Connection(SSL.Context(SSL.TLS_CLIENT_METHOD), None)
    client.set_connect_state()
    for _ in range(10):
        for one, other in ((client, server), (server, client)):
            with contextlib.suppress(SSL.WantReadError):
                one.do_handshake()
            while True:
                try:
                    other.bio_write(one.bio_read(65536))
                except SSL.WantReadError:
                    break
    received = client.get_peer_certificate(as_cryptography=True)
    assert received is not None
    return server, received


def x509_of(conn: SSL.Connection) -> int:
    """The address of the X509 OpenSSL holds for `conn` (compared while both live)."""
    return int(ffi.cast("uintptr_t", lib.SSL_get_certificate(conn._ssl)))


def pyopenssl_alone() -> None:
    SSL.Connection.use_certificate = tlsshare.ORIGINAL_USE_CERTIFICATE  # type: ignore[method-assign]
    SSL.Connection.use_privatekey = tlsshare.ORIGINAL_USE_PRIVATEKEY  # type: ignore[method-assign]


@pytest.fixture
def state() -> Any:
    """Whatever a test sets, the state before it (a LeanMaster may have shared) comes back."""
    installed = SSL.Connection.use_certificate is not tlsshare.ORIGINAL_USE_CERTIFICATE
    yield
    if installed:
        tlsshare.share_certificates()
    else:
        pyopenssl_alone()


@pytest.fixture
def shared(state: Any) -> None:
    tlsshare.share_certificates()


def test_pyopenssl_alone_makes_a_copy_per_connection(state: Any) -> None:
    pyopenssl_alone()
    cert, key = make_certificate()
    first, seen = presented(cert, key)
    second, _ = presented(cert, key)
    assert x509_of(first) != x509_of(second)
    assert seen == cert


def test_connections_share_one_copy_and_present_the_same_certificate(shared: Any) -> None:
    cert, key = make_certificate()
    first, seen_first = presented(cert, key)
    second, seen_second = presented(cert, key)
    assert x509_of(first) == x509_of(second)  # one OpenSSL X509 for both connections
    assert seen_first == seen_second == cert  # the bytes a client receives are unchanged
    other_cert, other_key = make_certificate()
    third, seen_third = presented(other_cert, other_key)
    assert x509_of(third) != x509_of(first) and seen_third == other_cert


def test_pyopenssl_objects_and_refusals_take_pyopenssl_s_own_path(shared: Any) -> None:
    cert, key = make_certificate()
    conn = SSL.Connection(SSL.Context(SSL.TLS_SERVER_METHOD), None)
    with pytest.warns(DeprecationWarning):
        conn.use_certificate(crypto.X509.from_cryptography(cert))
    with pytest.warns(DeprecationWarning):
        conn.use_privatekey(crypto.PKey.from_cryptography_key(key))
    # A key that is not the certificate's: OpenSSL refuses it, pyOpenSSL raises its error.
    _, stranger = make_certificate()
    with pytest.raises(SSL.Error):
        conn.use_privatekey(stranger)
    with pytest.raises(TypeError):
        conn.use_certificate("not a certificate")  # type: ignore[arg-type]


def test_the_cache_is_bounded_and_keeps_what_it_converted() -> None:
    made: list[object] = []

    def convert(thing: object) -> int:
        made.append(thing)
        return len(made)

    converted = tlsshare.Converted(convert, limit=2)
    a, b, c = object(), object(), object()
    assert (converted(a), converted(a), converted(b)) == (1, 1, 2)
    converted(a)  # a is now the most recently used
    assert converted(c) == 3 and len(converted) == 2
    assert converted(a) == 1  # kept
    assert converted(b) == 4  # dropped, converted again
