"""TLS on the server's one port: `wss://` and `https://` with certificates this test makes with the
`openssl` CLI (a throwaway CA and a server certificate for localhost / 127.0.0.1), refusals of
untrusted CAs, wrong host names, old protocol versions and plaintext, SIGHUP certificate reloads
that leave live connections alone, and startup errors for unusable files.
"""

from __future__ import annotations

import asyncio
import http.client
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest
import websockets

import support
from support import HOST, Peer, Server, run

SKIP = ("peer-joined", "peer-left", "typing", "read")


# --------------------------------------------------------------------------------------------
# A throwaway PKI


def openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"openssl {args[0]} failed: {result.stderr}"


class PKI:
    def __init__(self, directory: Path):
        self.dir = directory
        self.ca = self.make_ca("ca", "calling-server test CA")
        self.other_ca = self.make_ca("other-ca", "unrelated test CA")

    def make_ca(self, name: str, cn: str) -> Path:
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(self.dir / f"{name}.key"), "-out", str(self.dir / f"{name}.pem"), "-days", "3",
                "-subj", f"/CN={cn}")
        return self.dir / f"{name}.pem"

    def issue(self, name: str, names=("localhost", "127.0.0.1"), cn: str | None = None) -> tuple[Path, Path]:
        cert, key, csr, ext = (self.dir / f"{name}.{suffix}" for suffix in ("pem", "key", "csr", "ext"))
        san = ",".join(f"IP:{n}" if n.replace(".", "").isdigit() else f"DNS:{n}" for n in names)
        ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
                "-out", str(csr), "-subj", f"/CN={cn or names[0]}")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.dir / "ca.key"),
                "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))
        return cert, key

    def context(self, ca: Path | None = None) -> ssl.SSLContext:
        """What a careful client does: verify the chain against `ca` and the host name."""
        return ssl.create_default_context(cafile=str(ca or self.ca))


@pytest.fixture
def pki(tmp_path) -> PKI:
    directory = tmp_path / "pki"
    directory.mkdir()
    return PKI(directory)


@pytest.fixture
def tls_server(start_server, tmp_path, pki):
    """Starts servers serving `cert`/`key` (copied to stable paths a test may overwrite)."""
    count = iter(range(1000))

    def start(**flags) -> Server:
        n = next(count)
        served = tmp_path / f"served{n}"
        served.mkdir()
        cert, key = pki.issue(f"server{n}")
        shutil.copy(cert, served / "cert.pem")
        shutil.copy(key, served / "key.pem")
        return start_server(ssl_context=pki.context(), tls_cert_file=served / "cert.pem",
                            tls_key_file=served / "key.pem", **flags)

    return start


def served_certificate(port: int, context: ssl.SSLContext, server_hostname: str = HOST) -> dict:
    """The certificate a new TLS connection gets, as `ssl` decodes it (verified by `context`)."""
    with socket.create_connection((HOST, port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=server_hostname) as tls:
            return tls.getpeercert()


def wait_for_log(server: Server, text: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.stderr_text():
        assert time.monotonic() < deadline, f"no '{text}' in the server log:\n{server.stderr_text()}"
        time.sleep(0.05)


async def chat(peer: Peer, client_id: str, text: str) -> dict:
    await peer.send({"type": "chat", "payload": {"client_id": client_id, "text": text}})
    return await peer.recv_type("chat-ack", skip=SKIP)


# --------------------------------------------------------------------------------------------
# Serving


def test_wss_and_https_are_served_on_the_same_port(tls_server, pki):
    server = tls_server()
    assert "listening on https://" in server.stdout_path.read_text()

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        tls = alice.ws.transport.get_extra_info("ssl_object")
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        assert tls.compression() is None
        ack = await chat(alice, "c1", "over wss")
        assert ack["payload"]["seq"] == 1
        message = await bob.recv_type("chat", skip=SKIP)
        assert message["payload"]["text"] == "over wss"
        await alice.close()
        await bob.close()

    run(body())
    # https with http.client (support.Server.http) and with urllib, by DNS name this time.
    status, _, body_bytes = server.http("GET", "/healthz")
    assert (status, body_bytes) == (200, b'{"status":"ok"}')
    with urllib.request.urlopen(f"https://localhost:{server.port}/healthz", context=pki.context(), timeout=5) as reply:
        assert reply.status == 200
    status, _, history = server.get_json("/v1/rooms/r1/messages", token=server.token("r1", "carol"))
    assert status == 200 and [m["text"] for m in history["messages"]] == ["over wss"]


def test_untrusted_ca_wrong_host_old_versions_and_plaintext_are_refused_and_counted(tls_server, pki):
    server = tls_server()
    token = server.token("r1", "alice")
    untrusted = pki.context(pki.other_ca)

    async def websocket_refusals():
        with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
            await websockets.connect(f"wss://{HOST}:{server.port}/v1/ws?token={token}", ssl=untrusted, proxy=None,
                                     open_timeout=5)
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match"):
            await websockets.connect(f"wss://{HOST}:{server.port}/v1/ws?token={token}", ssl=pki.context(), proxy=None,
                                     server_hostname="calls.example.org", open_timeout=5)

    run(websocket_refusals())
    with pytest.raises(ssl.SSLCertVerificationError):
        http.client.HTTPSConnection(HOST, server.port, timeout=5, context=untrusted).request("GET", "/healthz")
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(f"https://{HOST}:{server.port}/healthz", context=untrusted, timeout=5)
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match"):
        served_certificate(server.port, pki.context(), server_hostname="calls.example.org")

    # TLS 1.1 is not offered by the server even to a client that would take it.
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(pki.ca)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated is the point here
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError):
        served_certificate(server.port, old)

    # Plaintext HTTP to the TLS port gets no HTTP answer (no silent downgrade).
    with socket.create_connection((HOST, server.port), timeout=5) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = raw.recv(100)
        except ConnectionResetError:
            answer = b""
        assert not answer.startswith(b"HTTP/"), answer

    refusals = 5 + 1 + 1  # the five certificate refusals above, the TLS 1.1 attempt, the plaintext request
    deadline = time.monotonic() + 5
    while True:
        failures = server.metrics()["calling_tls_handshake_failures_total"]
        if failures >= refusals or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert failures == refusals


def test_tls_13_only_refuses_tls_12(tls_server, pki):
    server = tls_server(tls_min_version="1.3")
    tls12 = pki.context()
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        served_certificate(server.port, tls12)
    assert served_certificate(server.port, pki.context())["subject"]


# --------------------------------------------------------------------------------------------
# Reloading


def test_sighup_serves_a_new_certificate_to_new_connections_while_old_ones_keep_chatting(tls_server, pki):
    server = tls_server()
    served_cert = Path(server.flags["tls_cert_file"])
    served_key = Path(server.flags["tls_key_file"])
    before = served_certificate(server.port, pki.context())

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        assert (await chat(alice, "a1", "before"))["payload"]["seq"] == 1
        assert (await bob.recv_type("chat", skip=SKIP))["payload"]["text"] == "before"

        # Renewal: a new certificate and key at the same paths, then SIGHUP.
        cert, key = pki.issue("renewed", cn="renewed.localhost")
        shutil.copy(cert, served_cert)
        shutil.copy(key, served_key)
        server.signal(signal.SIGHUP)
        await asyncio.to_thread(wait_for_log, server, "tls certificate reloaded")
        after = await asyncio.to_thread(served_certificate, server.port, pki.context())
        assert after["serialNumber"] != before["serialNumber"]
        assert ("commonName", "renewed.localhost") in [pair for rdn in after["subject"] for pair in rdn]

        # The connections opened before the reload are untouched: frames flow both ways.
        assert (await chat(alice, "a2", "after"))["payload"]["seq"] == 2
        assert (await bob.recv_type("chat", skip=SKIP))["payload"]["text"] == "after"
        assert (await chat(bob, "b1", "me too"))["payload"]["seq"] == 3
        assert (await alice.recv_type("chat", skip=SKIP))["payload"]["text"] == "me too"

        # A new peer over wss gets the new certificate and joins the same room.
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol")
        assert carol.ws.transport.get_extra_info("ssl_object").getpeercert()["serialNumber"] == after["serialNumber"]

        # A broken renewal (key of another certificate) is refused: the renewed one stays.
        _, stray_key = pki.issue("stray")
        shutil.copy(stray_key, served_key)
        server.signal(signal.SIGHUP)
        await asyncio.to_thread(wait_for_log, server, "reload failed")
        assert "is not the private key of the certificate" in server.stderr_text()
        still = await asyncio.to_thread(served_certificate, server.port, pki.context())
        assert still["serialNumber"] == after["serialNumber"]
        assert (await chat(alice, "a3", "still here"))["payload"]["seq"] == 4
        for peer in (alice, bob, carol):
            await peer.close()

    run(body(), timeout=25)
    assert server.alive()
    metrics = server.metrics()
    assert metrics["calling_tls_certificate_reloads_total"] == 1


def test_a_chain_file_is_sent_after_the_leaf(tls_server, pki, tmp_path):
    # The CA stands in for an intermediate: with it as tls_chain_file the server sends two certificates.
    server = tls_server(tls_chain_file=pki.ca)
    result = subprocess.run(["openssl", "s_client", "-connect", f"{HOST}:{server.port}", "-showcerts",
                             "-CAfile", str(pki.ca), "-verify_return_error"],
                            input="", capture_output=True, text=True, timeout=15)
    assert result.stdout.count("-----BEGIN CERTIFICATE-----") == 2, result.stdout
    assert "Verify return code: 0 (ok)" in result.stdout


# --------------------------------------------------------------------------------------------
# Startup errors


def serve(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    data = tmp_path / "data-startup"
    data.mkdir(exist_ok=True)
    return subprocess.run([str(support.BINARY), "serve", "--host", HOST, "--port", "0", "--data-dir", str(data), *flags],
                          capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)


def test_unusable_certificate_files_stop_the_start_with_a_clear_message(tmp_path, pki):
    cert, key = pki.issue("good")
    _, other_key = pki.issue("other")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("this is not a certificate\n")
    cases = [
        ((f"--tls_cert_file={tmp_path / 'missing.pem'}", f"--tls_key_file={key}"), 1,
         f"tls_cert_file {tmp_path / 'missing.pem'} does not exist"),
        ((f"--tls_cert_file={cert}", f"--tls_key_file={other_key}"), 1,
         f"tls_key_file {other_key} is not the private key of the certificate in {cert}"),
        ((f"--tls_cert_file={not_pem}", f"--tls_key_file={key}"), 1, f"tls_cert_file {not_pem} is not usable PEM"),
        ((f"--tls_cert_file={cert}", f"--tls_key_file={cert}"), 1, f"tls_key_file {cert} is not usable PEM"),
        ((f"--tls_cert_file={cert}",), 78, "tls_cert_file and tls_key_file must be set together"),
        ((f"--tls_cert_file={cert}", f"--tls_key_file={key}", "--tls_min_version=1.1"), 78,
         "tls_min_version: must be 1.2 or 1.3"),
    ]
    for flags, status, message in cases:
        result = serve(tmp_path, *flags)
        assert result.returncode == status, (flags, result.returncode, result.stderr)
        assert message in result.stderr, (flags, result.stderr)
        assert "listening" not in result.stdout
