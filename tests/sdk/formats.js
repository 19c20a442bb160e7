// The providers' documented header formats, checked strictly.
'use strict';
const assert = require('node:assert');

// A duration as OpenAI writes its x-ratelimit-reset-* ("20ms", "1s", "1.5s", "6m0s",
// "1h0m0s"): returns it in milliseconds, or fails.
function goDurationMs(s) {
  let m = /^(\d+)ms$/.exec(s);
  if (m && Number(m[1]) < 1000) return Number(m[1]);
  m = /^(?:(\d+)h)?(?:(\d+)m)?(\d+(?:\.\d*[1-9])?)s$/.exec(s || '');
  assert.ok(m, `${JSON.stringify(s)} is not a duration as OpenAI writes them`);
  const [h, min, sec] = [Number(m[1] || 0), Number(m[2] || 0), Number(m[3])];
  // Go's own rules: hours come with minutes, each field below its next unit, under 1 s in ms
  assert.ok(!m[1] || m[2] !== undefined, `${s}: hours without minutes`);
  assert.ok(sec < 60 && (!m[1] || min < 60), `${s}: a field out of range`);
  assert.ok(m[1] || m[2] || sec >= 1 || s === '0s', `${s}: under 1 s is written in ms`);
  return Math.round(((h * 60 + min) * 60 + sec) * 1000);
}

// A whole number of units, as both providers write limits and remaining amounts.
function integer(s) {
  assert.match(s || '', /^(0|[1-9]\d*)$/, `${JSON.stringify(s)} is not a whole number`);
  return Number(s);
}

// An RFC 3339 time in UTC to the second, as Anthropic writes its *-reset: returns it in ms.
function rfc3339Ms(s) {
  assert.match(s || '', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/,
    `${JSON.stringify(s)} is not an RFC 3339 UTC time`);
  return Date.parse(s);
}

// `ms` rounded up to the second.
const ceilSecond = (ms) => Math.ceil(ms / 1000) * 1000;

// The headers whose names match re, as a plain object.
function pick(headers, re) {
  const out = {};
  for (const [k, v] of headers) if (re.test(k)) out[k] = v;
  return out;
}

module.exports = { goDurationMs, integer, rfc3339Ms, ceilSecond, pick };
