#!/usr/bin/env python3
"""FAULT-INJECTING PROXY (a fake, named so): sits on loopback in front of a
real registry and breaks chosen responses, for berth's reliability tests.
Everything it does not break is the registry's own answer, byte for byte.

  faultproxy.py --upstream HOST:PORT --fault KIND [--count N]
                --port-file FILE --log FILE [--stall SECONDS]

KIND (applied to blob GETs, the first N of them; N=0: all):
  none       pass everything through
  status500  answer 500 Internal Server Error
  status503  answer 503 Service Unavailable (with Retry-After: 0)
  reset      send the headers and half the body, then reset the connection
  truncate   a well-formed response with half the body (short Content-Length)
  corrupt    the whole body with bytes flipped (a wrong digest)
  stall      send the headers, then nothing for --stall seconds (slow loris)
  throttle   send the body at --rate bytes per second (each response on
             its own: a CDN's per-connection limit), for the benchmarks
  norange    forward without the Range header (a registry that ignores
             range requests: the whole blob, 200)
  slow       wait --stall seconds, then answer; its log line ends with
             active=N, the blob GETs in flight then (how many a client
             fetches at once)
  auth401    a token registry whose tokens expire: /v2/ without a token
             gets a Bearer challenge (realm: this proxy's /token, which
             hands out tokens), and the first N manifest requests get a 401
             "token expired" even with one; then requests pass through

It writes the port it listens on to --port-file and one line per injected
fault to --log ("KIND METHOD PATH").
"""
import argparse
import http.client
import http.server
import json
import os
import socket
import struct
import sys
import threading
import time

ARGS = None
LOCK = threading.Lock()
FIRED = {"blob": 0, "manifest": 0}
ACTIVE = [0]


def take(kind):
    """Whether the next request of `kind` gets the fault."""
    with LOCK:
        if ARGS.count and FIRED[kind] >= ARGS.count:
            return False
        FIRED[kind] += 1
        return True


def note(line):
    with LOCK, open(ARGS.log, "a") as f:
        f.write(line + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def upstream(self, method, drop=()):
        conn = http.client.HTTPConnection(ARGS.upstream, timeout=60)
        headers = {}
        for k, v in self.headers.items():
            if k.lower() not in ("host", "authorization", "connection", *drop):
                # Repeated headers (podman sends one Accept per media type)
                # are joined, as HTTP allows.
                headers[k] = f"{headers[k]}, {v}" if k in headers else v
        conn.request(method, self.path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return resp, body

    def send(self, status, headers, body, length=None, flush_body=True):
        self.send_response(status)
        for k, v in headers:
            if k.lower() in ("content-length", "connection", "transfer-encoding"):
                continue
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if flush_body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def handle_one(self, method):
        if self.path.startswith("/token"):
            body = json.dumps({"token": "faultproxy", "access_token": "faultproxy"}).encode()
            self.send(200, [("Content-Type", "application/json")], body)
            return
        fault = ARGS.fault
        is_blob = "/blobs/sha256:" in self.path and method == "GET"
        is_manifest = "/manifests/" in self.path
        if fault == "auth401":
            unauthenticated = "Authorization" not in self.headers
            if (self.path.rstrip("/") == "/v2" and unauthenticated) or (is_manifest and take("manifest")):
                if is_manifest:
                    note(f"auth401 {method} {self.path}")
                repo = self.path.split("/v2/", 1)[-1].split("/manifests/")[0]
                port = self.server.server_address[1]
                challenge = (f'Bearer realm="http://127.0.0.1:{port}/token",'
                             f'service="faultproxy",scope="repository:{repo}:pull"')
                body = b'{"errors":[{"code":"UNAUTHORIZED","message":"token expired (faultproxy)"}]}'
                self.send(401, [("WWW-Authenticate", challenge), ("Content-Type", "application/json")], body)
                return
        if not (is_blob and fault not in ("none", "auth401") and take("blob")):
            resp, body = self.upstream(method)
            self.send(resp.status, resp.getheaders(), body)
            return
        if fault == "norange":
            note(f"norange {method} {self.path} range={self.headers.get('Range', '-')}")
            resp, body = self.upstream(method, drop=("range",))
            self.send(resp.status, resp.getheaders(), body)
            return
        if fault == "slow":
            with LOCK:
                ACTIVE[0] += 1
                active = ACTIVE[0]
            note(f"slow {method} {self.path} range={self.headers.get('Range', '-')} active={active}")
            try:
                time.sleep(ARGS.stall)
                resp, body = self.upstream(method)
                self.send(resp.status, resp.getheaders(), body)
            finally:
                with LOCK:
                    ACTIVE[0] -= 1
            return
        if fault == "throttle":
            resp, body = self.upstream(method)
            self.send(resp.status, resp.getheaders(), body, flush_body=False)
            if method == "GET":
                step = 64 * 1024
                start = time.monotonic()
                for off in range(0, len(body), step):
                    self.wfile.write(body[off:off + step])
                    ahead = (off + step) / ARGS.rate - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
                self.wfile.flush()
            return
        note(f"{fault} {method} {self.path}")
        if fault in ("status500", "status503"):
            code = 500 if fault == "status500" else 503
            extra = [("Retry-After", "0")] if code == 503 else []
            self.send(code, extra + [("Content-Type", "text/plain")], b"injected by faultproxy\n")
            return
        resp, body = self.upstream(method)
        headers = resp.getheaders()
        if fault == "truncate":
            self.send(resp.status, headers, body[: len(body) // 2])
        elif fault == "corrupt":
            flipped = bytes(b ^ 0x5A for b in body[:64]) + body[64:]
            self.send(resp.status, headers, flipped)
        elif fault == "reset":
            self.send(resp.status, headers, body, length=len(body), flush_body=False)
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            # SO_LINGER 0: close with RST, not FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
        elif fault == "stall":
            self.send(resp.status, headers, body, length=len(body), flush_body=False)
            time.sleep(ARGS.stall)
            self.close_connection = True
        else:
            self.send(resp.status, headers, body)

    def do_GET(self):
        try:
            self.handle_one("GET")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def do_HEAD(self):
        try:
            self.handle_one("HEAD")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--upstream", required=True)
    p.add_argument("--fault", required=True,
                   choices=["none", "status500", "status503", "reset", "truncate", "corrupt", "stall", "slow",
                            "norange", "throttle", "auth401"])
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--stall", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=25 * 1024 * 1024)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    ARGS = p.parse_args()
    open(ARGS.log, "w").close()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(ARGS.port_file + ".tmp", ARGS.port_file)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
