#!/usr/bin/env node
/*
 * fakehttp.js - an HTTP destination for inboxd's tests that keeps a ledger
 * of the effects it performed, per idempotency key, and injects faults.
 * Node's own http/https modules only. Prints its port on the first line of
 * stdout; exits when stdin closes (so it never outlives its test) unless
 * started with --detach.
 *
 *   node fakehttp.js [--mode idempotent|plain] [--tls CERT KEY]
 *                    [--key-header Idempotency-Key] [--port N] [--detach]
 *
 * Effects: POST/PUT/PATCH on any path not under /_. The request's key is
 * the key header, else the body's "orderId", else "(none)".
 *   idempotent  a key seen before gets the first effect's answer again
 *               (no second effect)
 *   plain       every request is a new effect, key or not
 * Success is 201 {"id": "fx-<n>", "key": K}.
 * Reconcile: GET on an effect path with ?key=K answers 200 {"id"} of the
 * first effect of K, or 404. With "lookup": "list" (POST /_config) it
 * answers as a search does: 200 [{"id", "key"}] or 200 [] when none.
 * With "lookup": "fail" it answers 500, with "lookup": "hang" never (a
 * lookup endpoint that is down); either way the lookup is in the ledger.
 * With "conflict_on_repeat": true, a key that already has an effect is
 * answered 409 {"id"} (the destination refuses a second charge) instead of
 * the replay of idempotent mode.
 *
 * Faults (POST /_config {"mode", "faults": [rule...]}, applied in order,
 * the first rule that fires wins). A rule fires for a request when the
 * key's hash modulo 100 is below pct (default 100), the key contains match
 * (if given), the key has had fewer than `times` earlier requests
 * (default: always), and, when the rule has `for_ms`, fewer than that many
 * milliseconds have passed since POST /_config (an outage window: the
 * ledger's requests carry `t`, so a test counts those inside it).
 *   {"kind": "delay", "delay_ms": D}   perform the effect, answer after D ms
 *   {"kind": "reset", "effect": true}  read the request, perform the effect
 *                                      (unless effect is false), reset the
 *                                      connection without an answer
 *   {"kind": "status", "status": S, "retry_after": R, "echo_auth": B}
 *                                      answer S (with Retry-After: R) and
 *                                      perform nothing; echo_auth puts the
 *                                      request's Authorization in the body
 *
 * Ledger: GET /_ledger -> {"requests": [{seq, method, path, key,
 * key_from_header, t, traceparent, fault, conn, authorization, in_flight}],
 * "effects": {key: [{id, seq}]}, "max_in_flight": N}. in_flight counts the
 * effect requests under way (read, not yet answered or closed) when the
 * request arrived, itself included; max_in_flight is the most seen. POST
 * /_reset clears the ledger and the faults.
 */
'use strict';
const http = require('node:http');
const https = require('node:https');
const fs = require('node:fs');

const args = process.argv.slice(2);
const opt = { mode: 'idempotent', keyHeader: 'idempotency-key', port: 0, tls: null, detach: false };
for (let i = 0; i < args.length; i++) {
  switch (args[i]) {
    case '--mode': opt.mode = args[++i]; break;
    case '--key-header': opt.keyHeader = args[++i].toLowerCase(); break;
    case '--port': opt.port = Number(args[++i]); break;
    case '--tls': opt.tls = { cert: fs.readFileSync(args[++i]), key: fs.readFileSync(args[++i]) }; break;
    case '--detach': opt.detach = true; break;
    default: console.error(`fakehttp: unknown argument ${args[i]}`); process.exit(2);
  }
}

let state;
function reset() {
  state = { mode: opt.mode, faults: [], requests: [], effects: new Map(), nextId: 1, perKey: new Map(),
    lookup: 'one', conflictOnRepeat: false, inFlight: 0, maxInFlight: 0 };
}
reset();

function hash(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619) >>> 0; }
  return h;
}

function send(res, status, obj, extra) {
  const body = JSON.stringify(obj);
  res.writeHead(status, Object.assign({ 'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(body) }, extra || {}));
  res.end(body);
}

/* The request's key, and whether it came in the key header. */
function keyOf(req, body) {
  const h = req.headers[opt.keyHeader];
  if (h) return { key: String(h), fromHeader: true };
  try { const j = JSON.parse(body); if (j && j.orderId !== undefined) return { key: String(j.orderId), fromHeader: false }; } catch (e) { /* not JSON */ }
  return { key: '(none)', fromHeader: false };
}

function pickFault(key, earlier) {
  for (const f of state.faults) {
    if (f.match !== undefined && !key.includes(f.match)) continue;
    if ((hash(key) % 100) >= (f.pct === undefined ? 100 : f.pct)) continue;
    if (f.times !== undefined && earlier >= f.times) continue;
    if (f.until !== undefined && Date.now() >= f.until) continue;
    return f;
  }
  return null;
}

/* Performs (or, for a known key at an idempotent destination, replays) the effect. */
function effect(key, seq) {
  const list = state.effects.get(key) || [];
  if (state.conflictOnRepeat && list.length > 0) return { status: 409, body: { error: 'already charged', id: list[0].id, key } };
  if (state.mode === 'idempotent' && list.length > 0) return { status: 201, body: { id: list[0].id, key, replayed: true } };
  const e = { id: `fx-${state.nextId++}`, seq };
  list.push(e);
  state.effects.set(key, list);
  return { status: 201, body: { id: e.id, key } };
}

function control(req, res, body) {
  if (req.method === 'GET' && req.url === '/_ledger') {
    return send(res, 200, { mode: state.mode, requests: state.requests, effects: Object.fromEntries(state.effects),
      max_in_flight: state.maxInFlight });
  }
  if (req.method === 'POST' && req.url === '/_reset') { reset(); return send(res, 200, {}); }
  if (req.method === 'POST' && req.url === '/_config') {
    const c = JSON.parse(body || '{}');
    if (c.mode) state.mode = c.mode;
    if (c.faults) {
      const now = Date.now();
      state.faults = c.faults.map((f) => (f.for_ms !== undefined ? Object.assign({ until: now + f.for_ms }, f) : f));
    }
    if (c.lookup) state.lookup = c.lookup;
    if (c.conflict_on_repeat !== undefined) state.conflictOnRepeat = !!c.conflict_on_repeat;
    return send(res, 200, { mode: state.mode, faults: state.faults });
  }
  return send(res, 404, { error: 'unknown control path' });
}

function reconcile(req, res) {
  const key = new URL(req.url, 'http://x').searchParams.get('key') || '';
  const list = state.effects.get(key) || [];
  state.requests.push({ seq: state.requests.length + 1, method: req.method, path: req.url, key,
    t: Date.now(), reconcile: true, found: list.length > 0, conn: req.socket.fxConn });
  if (state.lookup === 'fail') return send(res, 500, { error: 'lookup failed' });
  if (state.lookup === 'hang') return undefined;
  if (state.lookup === 'list') return send(res, 200, list.length ? [{ id: list[0].id, key }] : []);
  if (list.length === 0) return send(res, 404, { error: 'no such effect', key });
  return send(res, 200, { id: list[0].id, key });
}

function handle(req, res, body) {
  if (req.url.startsWith('/_')) return control(req, res, body);
  if (req.method === 'GET') return reconcile(req, res);
  const { key, fromHeader } = keyOf(req, body);
  const earlier = state.perKey.get(key) || 0;
  state.perKey.set(key, earlier + 1);
  const seq = state.requests.length + 1;
  const f = pickFault(key, earlier);
  const counted = state;
  counted.inFlight++;
  counted.maxInFlight = Math.max(counted.maxInFlight, counted.inFlight);
  let under = true;
  const over = () => { if (under) { under = false; counted.inFlight--; } };
  res.on('finish', over);
  res.on('close', over);
  state.requests.push({ seq, method: req.method, path: req.url, key, t: Date.now(),
    key_from_header: fromHeader, traceparent: req.headers.traceparent || null,
    fault: f ? f.kind : null, conn: req.socket.fxConn,
    authorization: req.headers.authorization ? true : false, in_flight: counted.inFlight });
  if (f && f.kind === 'status') {
    const extra = f.retry_after !== undefined ? { 'Retry-After': String(f.retry_after) } : {};
    /* echo_auth: a careless destination that repeats the credential it got. */
    const body = { error: `injected ${f.status}` };
    if (f.echo_auth) body.you_sent = req.headers.authorization || null;
    return send(res, f.status, body, extra);
  }
  if (f && f.kind === 'reset') {
    if (f.effect !== false) effect(key, seq);
    return req.socket.resetAndDestroy();
  }
  const out = effect(key, seq);
  if (f && f.kind === 'delay') {
    return setTimeout(() => { if (!res.destroyed) send(res, out.status, out.body); }, f.delay_ms || 5000);
  }
  return send(res, out.status, out.body);
}

const onRequest = (req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => handle(req, res, Buffer.concat(chunks).toString('utf8')));
};
const server = opt.tls ? https.createServer(opt.tls, onRequest) : http.createServer(onRequest);
server.keepAliveTimeout = 30000;
let conns = 0;
server.on(opt.tls ? 'secureConnection' : 'connection', (sock) => { sock.fxConn = ++conns; });
server.listen(opt.port, '127.0.0.1', () => {
  process.stdout.write(`${server.address().port}\n`);
});
if (!opt.detach) {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}
