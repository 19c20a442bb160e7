"""The fields of ratelimitd's HTTP API that this client knows, in one table.

Each operation lists what the client sends (`request`) and what it reads (`response`); a field of
a list of objects is written `list[].field`. The client's objects are built from this table
(`Decision`, `Limit`, `Settlement` carry exactly these names, as the API spells them), and
tests/test_contract.py compares it with api/openapi.yaml: a field the document has and this table
lacks fails the test, and so does a field this table has and the document lacks, unless it is in
PENDING.
"""

FIELDS = {
    "acquire": {
        "path": "/acquire",
        "request": ("keys", "cost", "usage", "priority", "reserve", "dry_run", "now"),
        "response": ("allowed", "retry_after", "blocked_by", "reservation", "limits",
                     "limits[].level", "limits[].key", "limits[].rule", "limits[].limit",
                     "limits[].remaining", "limits[].reset_after"),
    },
    "refund": {
        "path": "/refund",
        "request": ("reservation", "actual_cost", "actual_usage", "now", "latency_ms", "outcome"),
        "response": ("reservation", "reserved_cost", "actual_cost", "refunded", "charged",
                     "usage", "usd"),
    },
    "release": {
        "path": "/release",
        "request": ("reservation", "now", "latency_ms", "outcome"),
        "response": ("released",),
    },
}

# Fields of this table that api/openapi.yaml does not have yet (sent only when the caller gives
# them; a daemon without them answers 400 naming the field): none today.
PENDING = {}


def top(fields):
    """The names of `fields` that are not inside a list (`limits`, not `limits[].level`)."""
    return tuple(f for f in fields if "[]." not in f)


def inner(fields, name):
    """The fields of the objects of the list `name` (`level`, ... for `limits`)."""
    p = name + "[]."
    return tuple(f[len(p):] for f in fields if f.startswith(p))
