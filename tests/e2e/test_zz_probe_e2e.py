import socket, time
import h2.config, h2.connection, h2.events
from testbed.harness import Harness, TunnelRefused
from testbed.rawhttp import Conn, request_bytes


def h2get(harness, authority, headers_extra=(), body=None, sni_host=None):
    host = authority.rsplit(":", 1)[0]
    try:
        with harness.tunnel(authority, alpn=["h2"], check_hostname=False) as conn:
            sock = conn.sock
            print("alpn", sock.selected_alpn_protocol())
            c = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
            )
            c.initiate_connection()
            sid = 1
            c.send_headers(
                sid,
                [
                    (":method", "POST" if body else "GET"),
                    (":path", "/p"),
                    (":scheme", "https"),
                    (":authority", host),
                    *headers_extra,
                ],
                end_stream=body is None,
            )
            if body:
                c.send_data(sid, body, end_stream=True)
            sock.sendall(c.data_to_send())
            out = {}
            sock.settimeout(8)
            body_b = b""
            t = time.monotonic()
            while time.monotonic() - t < 8:
                d = sock.recv(65536)
                if not d:
                    out["closed"] = True
                    break
                for ev in c.receive_data(d):
                    if isinstance(ev, h2.events.ResponseReceived):
                        out["headers"] = dict(ev.headers)
                    elif isinstance(ev, h2.events.DataReceived):
                        body_b += ev.data
                    elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                        out["end"] = type(ev).__name__
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        out["goaway"] = ev.error_code
                sock.sendall(c.data_to_send())
                if "end" in out or "goaway" in out:
                    break
            out["body"] = body_b[:300]
            return out
    except TunnelRefused as e:
        return "tunnel refused " + str(e)[:300]
    except Exception as e:
        return repr(e)


def raw(harness, data, tls_authority=None):
    with harness.conn() as conn:
        if tls_authority:
            r = conn.connect(tls_authority)
            if r.status != 200:
                return f"connect {r.status}"
            conn.start_tls(harness.client_tls(), tls_authority.split(":")[0])
        conn.send(data)
        conn.sock.settimeout(8)
        out = b""
        try:
            while True:
                d = conn.sock.recv(65536)
                if not d:
                    break
                out += d
        except Exception as e:
            out += repr(e).encode()
        return out[:500]


def test_probe_pages(harness: Harness) -> None:
    print()
    print(
        "a",
        raw(
            harness,
            b"GET http://198.18.1.2:81/ HTTP/1.1\r\nHost: 198.18.1.2:81\r\nConnection: close\r\n\r\n",
        ),
    )
    print("b", h2get(harness, "198.18.1.2:444"))
    print("b2", h2get(harness, "198.18.1.2:444", body=b"x" * 10))
    print("c", raw(harness, b"GET http://198.18.1.2:81/ HTTP/1.0\r\n\r\n"))
    print(
        "d",
        raw(
            harness,
            b"GET http://198.18.1.2:81/ HTTP/1.1\r\nHost: 198.18.1.2:81\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        ),
    )
    print(
        "e",
        raw(
            harness,
            b"GET /x HTTP/1.1\r\nHost: 198.18.1.2:444\r\nConnection: close\r\n\r\n",
            tls_authority="198.18.1.2:444",
        ),
    )
    print("f", h2get(harness, "other.allowed.test:443", headers_extra=[("te", "gzip")]))
    print("g", h2get(harness, "other.allowed.test:443", headers_extra=[("connection", "close")]))
    print(
        "h",
        raw(
            harness,
            b"GET http://other.allowed.test/ HTTP/1.1\r\nHost: other.allowed.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
    )
    print(
        "i",
        raw(
            harness,
            b"GET http://other.allowed.test/ HTTP/1.1\r\nHost: other.allowed.test\r\nTransfer-Encoding: gzip\r\n\r\n",
        ),
    )
    print(
        "j",
        raw(
            harness,
            b"GET http://other.allowed.test/ HTTP/1.1\r\nHost: other.allowed.test\r\nContent-Length: 1, 2\r\n\r\n",
        ),
    )
    print(
        "k",
        raw(
            harness, b"GET http://other.allowed.test/ HTTP/2.0\r\nHost: other.allowed.test\r\n\r\n"
        ),
    )
    print("l", raw(harness, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
    print(
        "m",
        raw(harness, b"GET ftp://other.allowed.test/ HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n"),
    )
    print("n", raw(harness, b"GET * HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n"))
    print("o", raw(harness, b"OPTIONS * HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n"))
    print("p", raw(harness, b"GET / HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n"))
    print("q", raw(harness, b"GET http://other.allowed.test/ HTTP/1.1\r\n\r\n"))
    print(
        "r",
        raw(
            harness,
            b"GET http://other.allowed.test/ HTTP/1.1\r\nHost: other.allowed.test\r\nX: a\x00b\r\n\r\n",
        ),
    )
    print(
        "s",
        raw(
            harness,
            b"GET http://other.allowed.test/ HTTP/1.1\r\nHost: other.allowed.test\r\n bad-fold\r\n\r\n",
        ),
    )
    print(open(harness.proxy_stderr).read()[-4000:])
