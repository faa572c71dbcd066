#!/usr/bin/env python3
"""A minimal Docker registry token server, for berth's integration tests.

Implements the token flow of the distribution spec
(https://distribution.github.io/distribution/spec/auth/token/ and .../jwt/):

    GET /token?service=SERVICE&scope=repository:NAME:pull[,push]
        [&scope=...] [&account=...]

  - HTTP Basic credentials USER:PASSWORD: a token granting the requested
    `pull` and `push` actions on every requested repository (any other
    action, and any other resource type, is left out);
  - wrong or malformed credentials: 401 (WWW-Authenticate: Basic);
  - no Authorization header: an anonymous token with no access, so the
    registry answers 401 (insufficient_scope) to whatever it is used for;
  - a `service` other than ours: 400.

    POST /token (OAuth2, the spec's oauth.md), a form with service,
        client_id, scope and grant_type:

  - refresh_token: refresh_token must be this server's (--refresh-token,
    what docker keeps as an identity token): a token for its user;
  - password: username and password as above; access_type=offline adds
    the refresh token to the answer;
  - anything else, or a missing client_id: 400; a wrong secret: 401.

The answer is {"token", "access_token", "expires_in", "issued_at"}; the token
is a JWT (RS256) whose header carries the signing certificate in `x5c`
(default) or only its libtrust key ID in `kid` (--header kid); docker-registry
2.8 accepts both when `auth.token.rootcertbundle` holds that certificate.
Signing shells out to `openssl dgst -sha256 -sign KEY` (stdlib only).

Every request is logged to stderr (never the password).
"""

import argparse
import base64
import binascii
import hashlib
import json
import secrets
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

TOKEN_LIFETIME = 300
GRANTABLE = ("pull", "push")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def cert_der(cert_path: str) -> bytes:
    return subprocess.run(
        ["openssl", "x509", "-in", cert_path, "-outform", "DER"],
        check=True, capture_output=True).stdout


def libtrust_key_id(cert_path: str) -> str:
    """libtrust's key ID: the first 240 bits of SHA-256 over the DER
    SubjectPublicKeyInfo, base32, in 12 colon-separated groups of 4."""
    pem = subprocess.run(
        ["openssl", "x509", "-in", cert_path, "-noout", "-pubkey"],
        check=True, capture_output=True).stdout
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "DER"], input=pem,
        check=True, capture_output=True).stdout
    b32 = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode("ascii")
    return ":".join(b32[i:i + 4] for i in range(0, len(b32), 4))


def parse_scope(scope: str):
    """`TYPE:NAME:ACTIONS` -> (type, name, [actions]); NAME may hold ':'."""
    typ, sep, rest = scope.partition(":")
    name, sep2, actions = rest.rpartition(":")
    if not sep or not sep2 or not typ or not name:
        return None
    return typ, name, [a for a in actions.split(",") if a]


class TokenServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many tests pull at once

    def __init__(self, addr, args):
        super().__init__(addr, Handler)
        self.args = args
        if args.header == "x5c":
            der = cert_der(args.cert)
            self.jose_header = {"typ": "JWT", "alg": "RS256",
                                "x5c": [base64.b64encode(der).decode("ascii")]}
        else:
            self.jose_header = {"typ": "JWT", "alg": "RS256",
                                "kid": libtrust_key_id(args.cert)}

    def sign(self, claims: dict) -> str:
        signing_input = (b64url(json.dumps(self.jose_header, separators=(",", ":")).encode())
                         + "." + b64url(json.dumps(claims, separators=(",", ":")).encode()))
        sig = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", self.args.key],
            input=signing_input.encode("ascii"), check=True, capture_output=True).stdout
        return signing_input + "." + b64url(sig)


class Handler(BaseHTTPRequestHandler):
    server_version = "berth-test-token-server/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        sys.stderr.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), fmt % a))
        sys.stderr.flush()

    def send_json(self, status: int, body: dict, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def error(self, status: int, code: str, message: str, headers=()):
        self.log_message("-> %d %s: %s", status, code, message)
        self.send_json(status, {"errors": [{"code": code, "message": message}]}, headers)

    def credentials(self):
        """(ok, user): (True, None) anonymous, (True, USER), (False, None)."""
        header = self.headers.get("Authorization")
        if header is None:
            return True, None
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return False, None
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True) \
                .decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False, None
        a = self.server.args
        good = (sep and secrets.compare_digest(user, a.user)
                and secrets.compare_digest(password, a.password))
        return (True, user) if good else (False, None)

    def do_GET(self):
        a = self.server.args
        url = urlsplit(self.path)
        if url.path != "/token":
            return self.error(404, "NOT_FOUND", "no such endpoint (use /token)")
        query = parse_qs(url.query)
        service = query.get("service", [a.service])[0]
        if service != a.service:
            return self.error(400, "INVALID_REQUEST",
                              "unknown service %r (this server issues tokens for %r)"
                              % (service, a.service))
        ok, user = self.credentials()
        if not ok:
            return self.error(401, "UNAUTHORIZED", "invalid user name or password",
                              [("WWW-Authenticate", 'Basic realm="%s"' % a.service)])
        self.issue(user, query.get("scope", []), {})

    def issue(self, user, scopes, extra):
        """Answers with a token granting `user` (None: anonymous) what it
        may of `scopes` (one scope each; some clients join them with
        spaces), `extra` added to the answer."""
        a = self.server.args
        access = []
        for raw in scopes:
            for scope in raw.split():
                parsed = parse_scope(scope)
                if parsed is None:
                    return self.error(400, "INVALID_REQUEST", "malformed scope %r" % scope)
                typ, name, actions = parsed
                granted = [x for x in GRANTABLE if x in actions] if user else []
                if typ == "repository" and granted:
                    access.append({"type": typ, "name": name, "actions": granted})
        now = int(time.time())
        claims = {
            "iss": a.issuer,
            "sub": user or "",
            "aud": a.service,
            "exp": now + TOKEN_LIFETIME,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(16),
            "access": access,
        }
        token = self.server.sign(claims)
        self.log_message("-> 200 token for %s: %s", user or "<anonymous>",
                         json.dumps(access, separators=(",", ":")))
        issued = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        self.send_json(200, dict({"token": token, "access_token": token,
                                  "expires_in": TOKEN_LIFETIME, "issued_at": issued}, **extra))

    do_HEAD = do_GET

    def do_POST(self):
        a = self.server.args
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        if urlsplit(self.path).path != "/token":
            return self.error(404, "NOT_FOUND", "no such endpoint (use /token)")
        form = parse_qs(body)

        def one(key):
            return form.get(key, [""])[0]
        if (one("service") or a.service) != a.service:
            return self.error(400, "INVALID_REQUEST", "unknown service %r" % one("service"))
        if not one("client_id"):
            return self.error(400, "INVALID_REQUEST", "client_id is required")
        grant, extra = one("grant_type"), {}
        if grant == "refresh_token":
            if not secrets.compare_digest(one("refresh_token"), a.refresh_token):
                return self.error(401, "UNAUTHORIZED", "invalid refresh token")
        elif grant == "password":
            if not (secrets.compare_digest(one("username"), a.user)
                    and secrets.compare_digest(one("password"), a.password)):
                return self.error(401, "UNAUTHORIZED", "invalid user name or password")
            if one("access_type") == "offline":
                extra["refresh_token"] = a.refresh_token
        else:
            return self.error(400, "UNSUPPORTED_GRANT", "unsupported grant_type %r" % grant)
        self.log_message("POST %s grant for client %s", grant, one("client_id"))
        self.issue(a.user, form.get("scope", []), extra)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--key", required=True, help="RSA private key (PEM)")
    p.add_argument("--cert", required=True,
                   help="its certificate (PEM), the registry's rootcertbundle")
    p.add_argument("--listen", default="127.0.0.1:5003", help="HOST:PORT")
    p.add_argument("--issuer", default="berth-test-issuer")
    p.add_argument("--service", default="berth-test-registry")
    p.add_argument("--user", default="berth")
    p.add_argument("--password", default="s3cret-pass")
    p.add_argument("--refresh-token", default="berth-test-identity-token",
                   help="the refresh token (docker's identity token) it accepts")
    p.add_argument("--header", choices=("x5c", "kid"), default="x5c",
                   help="how the JWT names its signing key")
    args = p.parse_args()
    host, _, port = args.listen.rpartition(":")
    server = TokenServer((host, int(port)), args)
    server.sign({"probe": True})  # fail now, not at the first request, on a bad key
    sys.stderr.write("token server on http://%s/token (service %s, issuer %s, %s)\n"
                     % (args.listen, args.service, args.issuer, args.header))
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
