#!/usr/bin/python3
"""delaywheel from Python: over HTTP with the standard library, over gRPC with
stubs generated from transport/api/delaywheel.proto at run time.

For each API given (--http, --grpc) it enqueues one message due --delay-ms
from now, reserves it with a long-poll, checks the delivery against what it
sent (id, topic, body, header, due time, first attempt), acks it, and checks
that the ack settled it and that the message is gone. It prints one line per
step and "ok: ..." at the end; on the first error or mismatch it prints the
reason to stderr and exits 1.

    /usr/bin/python3 example.py --http http://127.0.0.1:7070 --grpc 127.0.0.1:7072

The gRPC part needs Debian's protobuf-compiler, protobuf-compiler-grpc,
python3-grpcio and python3-protobuf (see README.md); the HTTP part needs
nothing but Python 3.
"""

import argparse
import base64
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO = os.path.join(HERE, "..", "..", "api", "delaywheel.proto")


class Failure(Exception):
    """A step failed or returned something other than what was sent."""


def check(what, got, want):
    if got != want:
        raise Failure("%s: got %r, want %r" % (what, got, want))


# ---- HTTP (urllib only) ----------------------------------------------------


class HTTPClient:
    """A few calls of the HTTP API; errors carry the API's error JSON."""

    def __init__(self, base, token, timeout):
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method, path, body=None, timeout=None):
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, {"error": {"code": "http_%d" % e.code, "message": raw.decode("utf-8", "replace")}}

    def ok(self, method, path, body=None, timeout=None):
        status, answer = self.call(method, path, body, timeout)
        if status != 200:
            err = answer.get("error", {})
            raise Failure("%s %s: %d %s: %s" % (method, path, status, err.get("code"), err.get("message")))
        return answer


def delivery_body(d):
    """A delivery carries "body" (the bytes as UTF-8 text) or, for bytes that
    are not valid UTF-8, "body_base64"."""
    if "body_base64" in d:
        return base64.b64decode(d["body_base64"])
    return d.get("body", "").encode("utf-8")


def run_http(base, token, topic, delay_ms):
    cl = HTTPClient(base, token, timeout=10)
    body = b'{"order": 42, "via": "http"}'
    sent = {"topic": topic, "body": body.decode("utf-8"), "delay_ms": delay_ms, "headers": {"X-Example": "http"}}
    res = cl.ok("POST", "/v1/messages", {"messages": [sent]})["results"][0]
    check("http enqueue duplicate", res["duplicate"], False)
    print("http: enqueued %s due at %d (in %d ms)" % (res["id"], res["deliver_at_ms"], delay_ms), flush=True)

    start = time.monotonic()
    wait_ms = delay_ms + 10000
    path = "/v1/topics/%s/reserve" % urllib.parse.quote(topic, safe="")
    got = cl.ok("POST", path, {"max": 1, "wait_ms": wait_ms}, timeout=wait_ms / 1000 + 10)["messages"]
    check("http reserve: messages", len(got), 1)
    d = got[0]
    check("http delivery id", d["id"], res["id"])
    check("http delivery topic", d["topic"], topic)
    check("http delivery body", delivery_body(d), body)
    check("http delivery header X-Example", d["headers"].get("X-Example"), "http")
    check("http delivery deliver_at_ms", d["deliver_at_ms"], res["deliver_at_ms"])
    check("http delivery attempt", d["attempt"], 1)
    print("http: reserved %s, attempt 1, after %d ms; body and header as sent" % (d["id"], (time.monotonic() - start) * 1000), flush=True)

    acked = cl.ok("POST", "/v1/ack", {"receipts": [d["receipt"]]})
    check("http ack", (acked["acked"], acked["stale"]), (1, 0))
    status, _ = cl.call("GET", "/v1/messages/" + d["id"])
    check("http get after ack: status", status, 404)
    print("http: acked 1, stale 0; the message is gone (404)", flush=True)


# ---- gRPC (stubs generated at run time) -----------------------------------


def generate_stubs(proto, out_dir):
    """Runs Debian's protoc with grpc_python_plugin on proto into out_dir and
    imports the two modules it writes."""
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        raise Failure("generating the gRPC stubs needs protoc and grpc_python_plugin: "
                      "apt-get install protobuf-compiler protobuf-compiler-grpc")
    cmd = [protoc, "-I", os.path.dirname(proto), "--python_out=" + out_dir, "--grpc_out=" + out_dir,
           "--plugin=protoc-gen-grpc=" + plugin, os.path.basename(proto)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise Failure("%s: exit %d: %s" % (" ".join(cmd), done.returncode, done.stderr.strip()))
    sys.path.insert(0, out_dir)
    return importlib.import_module("delaywheel_pb2"), importlib.import_module("delaywheel_pb2_grpc")


def run_grpc(target, token, topic, delay_ms, proto):
    import grpc  # python3-grpcio; imported here so that --http alone needs nothing

    with tempfile.TemporaryDirectory(prefix="delaywheel-stubs-") as out_dir:
        pb, pb_grpc = generate_stubs(proto, out_dir)
        md = [("authorization", "Bearer " + token)] if token else []
        with grpc.insecure_channel(target) as ch:
            stub = pb_grpc.DelaywheelStub(ch)
            try:
                grpc_flow(pb, stub, md, topic, delay_ms)
            except grpc.RpcError as e:
                raise Failure("grpc: %s: %s" % (e.code().name, e.details()))


def grpc_flow(pb, stub, md, topic, delay_ms):
    import grpc

    body = b'{"order": 42, "via": "grpc"}'
    msg = pb.Message(topic=topic, body=body, delay_ms=delay_ms, headers={"X-Example": "grpc"})
    res = stub.Enqueue(pb.EnqueueRequest(messages=[msg]), metadata=md, timeout=10).results[0]
    check("grpc enqueue duplicate", res.duplicate, False)
    print("grpc: enqueued %s due at %d (in %d ms)" % (res.id, res.deliver_at_ms, delay_ms), flush=True)

    start = time.monotonic()
    wait_ms = delay_ms + 10000
    got = stub.Reserve(pb.ReserveRequest(topic=topic, max=1, wait_ms=wait_ms), metadata=md,
                       timeout=wait_ms / 1000 + 10).messages
    check("grpc reserve: messages", len(got), 1)
    d = got[0]
    check("grpc delivery id", d.id, res.id)
    check("grpc delivery topic", d.topic, topic)
    check("grpc delivery body", d.body, body)
    check("grpc delivery header X-Example", d.headers.get("X-Example"), "grpc")
    check("grpc delivery deliver_at_ms", d.deliver_at_ms, res.deliver_at_ms)
    check("grpc delivery attempt", d.attempt, 1)
    print("grpc: reserved %s, attempt 1, after %d ms; body and header as sent" % (d.id, (time.monotonic() - start) * 1000), flush=True)

    acked = stub.Ack(pb.ReceiptsRequest(receipts=[d.receipt]), metadata=md, timeout=10)
    check("grpc ack", (acked.done, acked.stale), (1, 0))
    try:
        stub.Get(pb.GetRequest(id=d.id), metadata=md, timeout=10)
        raise Failure("grpc get after ack: the message %s is still there" % d.id)
    except grpc.RpcError as e:
        check("grpc get after ack: code", e.code(), grpc.StatusCode.NOT_FOUND)
    print("grpc: acked 1, stale 0; the message is gone (NOT_FOUND)", flush=True)


# ---- main -------------------------------------------------------------------


def main(argv):
    p = argparse.ArgumentParser(description="Enqueue, reserve and ack one message over delaywheel's HTTP and gRPC APIs.")
    p.add_argument("--http", metavar="URL", help="a node's HTTP API, e.g. http://127.0.0.1:7070")
    p.add_argument("--grpc", metavar="HOST:PORT", help="a node's gRPC API, e.g. 127.0.0.1:7072 (plaintext)")
    p.add_argument("--token-file", default=os.environ.get("DELAYWHEEL_TOKEN_FILE", ""),
                   help="file holding the bearer token (default: $DELAYWHEEL_TOKEN_FILE; none when empty)")
    p.add_argument("--topic", default="", help="topic to use (default: example.<random>, so that no earlier message is taken)")
    p.add_argument("--delay-ms", type=int, default=1500, help="how far ahead each message is due (default 1500)")
    p.add_argument("--proto", default=DEFAULT_PROTO, help="the schema to generate the gRPC stubs from")
    args = p.parse_args(argv)
    if not args.http and not args.grpc:
        p.error("give --http, --grpc or both")
    token = ""
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()
    topic = args.topic or "example." + os.urandom(6).hex()
    done = []
    try:
        if args.http:
            run_http(args.http, token, topic + ".http", args.delay_ms)
            done.append("http")
        if args.grpc:
            run_grpc(args.grpc, token, topic + ".grpc", args.delay_ms, os.path.abspath(args.proto))
            done.append("grpc")
    except (Failure, OSError) as e:
        print("error:", e, file=sys.stderr)
        return 1
    print("ok: " + " ".join(done))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
