// receiver.mjs - a test OTLP/HTTP trace receiver. POST /v1/traces with
// application/x-protobuf is decoded with the official opentelemetry-proto
// definitions (as compiled in @opentelemetry/otlp-transformer 0.52.1), with
// application/json parsed as the OTLP/JSON mapping; every span is appended to
// FILE as one JSON line in one normal form: {traceId, spanId, parentSpanId,
// name, kind, flags, attributes: {key: value}, links: [{traceId, spanId}],
// status: {code, message}, resource: {key: value}, protocol}. Anything else is
// answered 400 and recorded as {"error": ...}.
//
//   node receiver.mjs FILE      prints {"port": N} once listening
//   node receiver.mjs --count   records nothing: counts the spans of each
//                               protobuf request by walking its framing
//                               only (a benchmark's collector, light on
//                               the CPU it shares) and prints
//                               {"requests", "spans", "bytes"} on SIGTERM
import { createServer } from "node:http";
import { appendFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const root = require("@opentelemetry/otlp-transformer/build/src/generated/root");
const Request = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
const Response = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse;
const file = process.argv[2];
const countOnly = file === "--count";

const hex = (b) => (b && b.length ? Buffer.from(b).toString("hex") : "");

// AnyValue in either mapping: {stringValue} | {intValue} | {boolValue} | ...
function value(v) {
  if (!v) return null;
  if (v.stringValue !== undefined && v.stringValue !== null) return v.stringValue;
  if (v.intValue !== undefined && v.intValue !== null) return Number(v.intValue);
  if (v.boolValue !== undefined && v.boolValue !== null) return v.boolValue;
  if (v.doubleValue !== undefined && v.doubleValue !== null) return v.doubleValue;
  return null;
}
const attrs = (list) => Object.fromEntries((list || []).map((kv) => [kv.key, value(kv.value)]));

// The protobuf message as plain objects: ids as hex, 64-bit numbers as strings.
function fromProtobuf(buf) {
  const msg = Request.decode(buf);
  const o = Request.toObject(msg, { longs: String, enums: Number, defaults: false });
  for (const rs of o.resourceSpans || [])
    for (const ss of rs.scopeSpans || [])
      for (const s of ss.spans || []) {
        s.traceId = hex(s.traceId);
        s.spanId = hex(s.spanId);
        s.parentSpanId = hex(s.parentSpanId);
        for (const l of s.links || []) {
          l.traceId = hex(l.traceId);
          l.spanId = hex(l.spanId);
        }
      }
  return o;
}

function record(o, protocol) {
  let n = 0;
  for (const rs of o.resourceSpans || []) {
    const resource = attrs(rs.resource && rs.resource.attributes);
    for (const ss of rs.scopeSpans || [])
      for (const s of ss.spans || []) {
        appendFileSync(file, JSON.stringify({
          traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId || "",
          name: s.name, kind: s.kind, flags: s.flags || 0,
          start: String(s.startTimeUnixNano), end: String(s.endTimeUnixNano),
          attributes: attrs(s.attributes),
          links: (s.links || []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
          status: s.status || {}, resource, scope: ss.scope && ss.scope.name, protocol,
        }) + "\n");
        n++;
      }
  }
  return n;
}

// A protobuf varint at b[i]: [value, next index].
function varint(b, i) {
  let v = 0, mul = 1;
  for (;;) {
    const x = b[i++];
    v += (x & 0x7f) * mul;
    if (x < 0x80) return [v, i];
    mul *= 128;
  }
}

// Calls each(field, start, end) for the length-delimited fields of b[start, end).
function fields(b, start, end, each) {
  for (let i = start; i < end;) {
    let key, len;
    [key, i] = varint(b, i);
    const wt = key & 7;
    if (wt === 0) [, i] = varint(b, i);
    else if (wt === 1) i += 8;
    else if (wt === 5) i += 4;
    else if (wt === 2) {
      [len, i] = varint(b, i);
      each(key >>> 3, i, i + len);
      i += len;
    } else throw new Error(`wire type ${wt}`);
  }
}

// ExportTraceServiceRequest.resource_spans(1).scope_spans(2).spans(2), counted.
function countSpans(b) {
  let n = 0;
  fields(b, 0, b.length, (f, s, e) => f === 1 && fields(b, s, e, (f2, s2, e2) =>
    f2 === 2 && fields(b, s2, e2, (f3) => { if (f3 === 2) n++; })));
  return n;
}

const tally = { requests: 0, spans: 0, bytes: 0 };
if (countOnly)
  process.on("SIGTERM", () => { console.error(JSON.stringify(tally)); process.exit(0); });

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const type = (req.headers["content-type"] || "").split(";")[0];
    try {
      if (req.method !== "POST" || req.url !== "/v1/traces") throw new Error(`${req.method} ${req.url}`);
      if (countOnly && type === "application/x-protobuf") {
        tally.requests++;
        tally.bytes += body.length;
        tally.spans += countSpans(body);
        res.writeHead(200, { "content-type": "application/x-protobuf" });
        res.end();
      } else if (type === "application/x-protobuf") {
        record(fromProtobuf(body), "http/protobuf");
        res.writeHead(200, { "content-type": "application/x-protobuf" });
        res.end(Buffer.from(Response.encode(Response.create({})).finish()));
      } else if (type === "application/json") {
        record(JSON.parse(body.toString("utf8")), "http/json");
        res.writeHead(200, { "content-type": "application/json" });
        res.end("{}");
      } else {
        throw new Error(`content-type ${type}`);
      }
    } catch (e) {
      const line = JSON.stringify({ error: String(e.message || e) });
      if (countOnly) console.error(line);
      else appendFileSync(file, line + "\n");
      res.writeHead(400);
      res.end();
    }
  });
});
server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: server.address().port })));
