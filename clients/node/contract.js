// The fields of ratelimitd's HTTP API that this client knows, in one table.
//
// Each operation lists what the client sends (`request`: the API's field name -> the name of
// the option that gives it) and what it reads (`response`; a field of a list of objects is
// written `list[].field`). The requests are built from this table and the decisions and
// settlements carry exactly its answer fields, as the API spells them. test/contract.test.js
// compares it with api/openapi.yaml: a field the document has and this table lacks fails the
// test, and so does a field this table has and the document lacks, unless it is in PENDING.
export const FIELDS = {
  acquire: {
    path: '/acquire',
    request: {
      keys: 'keys', cost: 'cost', usage: 'usage', priority: 'priority', reserve: 'reserve',
      dry_run: 'dryRun', now: 'now',
    },
    response: [
      'allowed', 'retry_after', 'blocked_by', 'reservation', 'limits',
      'limits[].level', 'limits[].key', 'limits[].rule', 'limits[].limit',
      'limits[].remaining', 'limits[].reset_after',
    ],
  },
  refund: {
    path: '/refund',
    request: {
      reservation: 'reservation', actual_cost: 'actualCost', actual_usage: 'actualUsage',
      now: 'now', latency_ms: 'latencyMs', outcome: 'outcome',
    },
    response: ['reservation', 'reserved_cost', 'actual_cost', 'refunded', 'charged', 'usage', 'usd'],
  },
  release: {
    path: '/release',
    request: { reservation: 'reservation', now: 'now', latency_ms: 'latencyMs', outcome: 'outcome' },
    response: ['released'],
  },
};

// Fields of this table that api/openapi.yaml does not have yet (sent only when the caller gives
// them; a daemon without them answers 400 naming the field): none today.
export const PENDING = {};

// The names of `fields` that are not inside a list ('limits', not 'limits[].level').
export const top = (fields) => fields.filter((f) => !f.includes('[].'));

// The fields of the objects of the list `name` ('level', ... for 'limits').
export const inner = (fields, name) =>
  fields.filter((f) => f.startsWith(name + '[].')).map((f) => f.slice(name.length + 3));
