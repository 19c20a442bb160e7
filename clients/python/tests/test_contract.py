"""The client's table of fields (ratelimitd/contract.py) against api/openapi.yaml, read with
Debian's python3-yaml: every request and answer field of /acquire, /refund and /release in the
document must be in the table, every field of the table in the document (but those PENDING,
which must not be there yet), and the client's objects must carry exactly the table's fields.
"""
import copy
import dataclasses
import http.server
import inspect
import json
import os
import threading
import unittest
import unittest.mock

import yaml

from daemon import ROOT
from ratelimitd import Client, Decision, Limit, Settlement
from ratelimitd.contract import FIELDS, PENDING, inner, top

# What a Decision has beyond /acquire's answer (documented in Decision's docstring).
DECISION_EXTRA = {"headers", "unavailable", "error"}


def load():
    with open(os.path.join(ROOT, "api", "openapi.yaml")) as f:
        return yaml.safe_load(f)


def resolve(doc, node):
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), "only local $ref are read: " + ref
        node = doc
        for part in ref[2:].split("/"):
            node = node[part]
    return node


def fields(doc, schema, prefix=""):
    """The field paths of a JSON schema: `name`, and `name[].field` for a list of objects."""
    schema = resolve(doc, schema)
    for word in ("allOf", "oneOf", "anyOf"):
        assert word not in schema, "the contract test does not read %s: teach it" % word
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        out.append(prefix + name)
        sub = resolve(doc, sub)
        if sub.get("type") == "array" and "items" in sub:
            out += fields(doc, sub["items"], prefix + name + "[].")
        elif sub.get("type") == "object" and "properties" in sub:
            out += fields(doc, sub, prefix + name + ".")
    return out


def documented(doc, path):
    """(request fields, answer fields) of POST `path`: the answers are those of 2xx and 429."""
    op = doc["paths"][path]["post"]
    req = fields(doc, op["requestBody"]["content"]["application/json"]["schema"])
    resp = []
    for code, answer in op["responses"].items():
        answer = resolve(doc, answer)
        if str(code).startswith("2") or str(code) == "429":
            resp += fields(doc, answer["content"]["application/json"]["schema"])
    return set(req), set(resp)


def differences(doc):
    """What the document and the table disagree on, as messages."""
    out = []
    for op, t in FIELDS.items():
        req, resp = documented(doc, t["path"])
        pending = set(PENDING.get(op, ()))
        for kind, doc_fields, mine in (("request", req, set(t["request"])),
                                       ("answer", resp, set(t["response"]))):
            for f in sorted(doc_fields - mine):
                out.append("%s %s field %s is in api/openapi.yaml but not in the client's "
                           "table (ratelimitd/contract.py)" % (t["path"], kind, f))
            for f in sorted(mine - doc_fields - pending):
                out.append("%s %s field %s is in the client's table but not in api/openapi.yaml"
                           % (t["path"], kind, f))
            for f in sorted(doc_fields & pending):
                out.append("%s %s field %s is in api/openapi.yaml now: drop it from PENDING"
                           % (t["path"], kind, f))
    return out


class Contract(unittest.TestCase):
    def test_the_table_follows_the_document(self):
        self.assertEqual(differences(load()), [])

    def test_a_field_added_to_the_document_fails(self):
        doc = load()
        d = copy.deepcopy(doc)
        d["components"]["schemas"]["Decision"]["properties"]["quota_left"] = {"type": "number"}
        d["components"]["schemas"]["Limit"]["properties"]["window"] = {"type": "number"}
        d["components"]["schemas"]["RefundRequest"]["properties"]["reason"] = {"type": "string"}
        self.assertEqual(differences(d), [
            "/acquire answer field limits[].window is in api/openapi.yaml but not in the "
            "client's table (ratelimitd/contract.py)",
            "/acquire answer field quota_left is in api/openapi.yaml but not in the client's "
            "table (ratelimitd/contract.py)",
            "/refund request field reason is in api/openapi.yaml but not in the client's table "
            "(ratelimitd/contract.py)"])
        d = copy.deepcopy(doc)
        del d["components"]["schemas"]["Settlement"]["properties"]["charged"]
        with unittest.mock.patch.dict(PENDING, {"acquire": ("usage",)}):
            self.assertEqual(differences(d), [
                "/acquire request field usage is in api/openapi.yaml now: drop it from PENDING",
                "/refund answer field charged is in the client's table but not in "
                "api/openapi.yaml"])

    def test_the_objects_carry_the_table(self):
        names = lambda cls: {f.name for f in dataclasses.fields(cls)}
        acquire = FIELDS["acquire"]["response"]
        self.assertEqual(names(Decision) - DECISION_EXTRA, set(top(acquire)))
        self.assertEqual(names(Limit), set(inner(acquire, "limits")))
        self.assertEqual(names(Settlement), set(FIELDS["refund"]["response"]))

    def test_the_operations_take_every_request_field(self):
        for op in FIELDS:
            params = set(inspect.signature(getattr(Client, op)).parameters)
            self.assertLessEqual(set(FIELDS[op]["request"]), params, op)

    def test_the_client_sends_and_reads_every_field(self):
        # A stand-in daemon that records each body and answers with every field of the table.
        answers = {
            "/acquire": {"allowed": True, "retry_after": 0, "blocked_by": None,
                         "reservation": "r-0123456789abcdef",
                         "limits": [{"level": "u", "key": "k", "rule": "r", "limit": 1,
                                     "remaining": 0, "reset_after": 1}]},
            "/refund": {"reservation": "r-0123456789abcdef", "reserved_cost": 2,
                        "actual_cost": 1, "refunded": 1, "charged": 0},
            "/release": {"released": True},
        }
        seen = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers["Content-Length"])
                seen[self.path] = json.loads(self.rfile.read(n))
                body = json.dumps(answers[self.path]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        c = Client("http://127.0.0.1:%d" % server.server_address[1])
        try:
            d = c.acquire({"user": "a"}, cost=2, usage={"input_tokens": 1}, priority=1,
                          reserve=True, dry_run=True, now=5)
            s = c.refund("r-0123456789abcdef", 1, actual_usage={"input_tokens": 1}, now=5,
                         latency_ms=120, outcome="ok")
            self.assertTrue(c.release("r-0123456789abcdef", now=5, latency_ms=120,
                                      outcome="error"))
        finally:
            c.close()
            server.shutdown()
            server.server_close()
        for op in FIELDS.values():
            self.assertEqual(set(seen[op["path"]]), set(op["request"]), op["path"])
        self.assertEqual(d.reservation, "r-0123456789abcdef")
        self.assertEqual(d.limits, (Limit("u", "k", "r", 1, 0, 1),))
        self.assertEqual(s, Settlement("r-0123456789abcdef", 2, 1, 1, 0))


if __name__ == "__main__":
    unittest.main()
