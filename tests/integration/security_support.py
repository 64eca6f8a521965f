"""Helpers for the security and bad-input integration tests: throwaway certificates made with
openssl at test time, python3-grpcio stubs generated from our protos, and HTTP(S) requests.
Standard library plus Debian's python3-grpcio (tests skip without it)."""

import json
import os
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _ca(cwd, name):
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=%s" % name, "-keyout", name + ".key", "-out", name + ".pem", cwd=cwd)


def _leaf(cwd, name, ca, san, usage):
    ext = os.path.join(cwd, name + ".ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=%s\n" % usage)
        if san:
            f.write("subjectAltName=%s\n" % san)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=%s" % name, "-keyout",
             name + ".key", "-out", name + ".csr", cwd=cwd)
    _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
             "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", name + ".pem", cwd=cwd)


def make_certs():
    """A directory with ca, node (server+client, SAN localhost/127.0.0.1; every pdspark process
    uses it), client (client only), and rogue-ca / rogue-client (a CA nobody trusts)."""
    d = tempfile.mkdtemp(prefix="pdspark-certs-")
    _ca(d, "ca")
    _ca(d, "rogue-ca")
    _leaf(d, "node", "ca", "DNS:localhost,IP:127.0.0.1", "serverAuth,clientAuth")
    _leaf(d, "client", "ca", "", "clientAuth")
    _leaf(d, "rogue-client", "rogue-ca", "", "clientAuth")
    _leaf(d, "rogue-node", "rogue-ca", "DNS:localhost,IP:127.0.0.1", "serverAuth,clientAuth")
    return d


def tls_flags(certs, name="node", require_client_cert=True):
    flags = ["--tls-cert", os.path.join(certs, name + ".pem"),
             "--tls-key", os.path.join(certs, name + ".key"),
             "--tls-ca", os.path.join(certs, "ca.pem")]
    return flags + (["--tls-require-client-cert"] if require_client_cert else [])


def ssl_context(certs, client=None, ca="ca"):
    ctx = ssl.create_default_context(cafile=os.path.join(certs, ca + ".pem"))
    if client:
        ctx.load_cert_chain(os.path.join(certs, client + ".pem"), os.path.join(certs, client + ".key"))
    return ctx


def request(port, path, body=None, raw=None, headers=None, scheme="http", context=None,
            timeout=120, method=None):
    """(status, parsed JSON body or raw bytes when it is not JSON)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    req = urllib.request.Request("%s://127.0.0.1:%d%s" % (scheme, port, path), data=data,
                                 headers=h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            status, payload = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, payload = e.code, e.read()
    try:
        return status, json.loads(payload or b"{}")
    except ValueError:
        return status, payload
