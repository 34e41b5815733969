// typed-props.mjs - the official @azure/service-bus SDK sends messages whose
// application properties hold every AMQP type the SDKs send (the .NET, Java
// and JavaScript ones: integers of each width, ulong past 2^63, float,
// double, decimal128, char, bool, null, string, symbol, timestamp, uuid,
// binary, list, map, array, and the described values .NET writes for
// TimeSpan, DateTimeOffset and Uri), and reads messages back with the
// exact AMQP type of each value.
//
//   node typed-props.mjs send CONNECTION_STRING QUEUE N
//       sends N messages (message ids typed-1..N) and prints, one JSON line
//       per message, {"message_id", "props"}: the typed rendering below.
//   node typed-props.mjs deadletter CONNECTION_STRING QUEUE N
//       receives N messages and dead-letters them (reason "TypedProps").
//   node typed-props.mjs receive CONNECTION_STRING QUEUE N
//       receives N messages (complete) and prints the same lines for them.
//
// The rendering of a value is {"t": type, "v": value}: t is the AMQP type
// name without its encoding width (str8 and str32 are both "string"), v the
// value as text or hex (nested: an array of renderings; a described value
// adds "d", its descriptor's rendering). The SDK hands the application
// user plain JavaScript values (a ubyte and an int are both a number), so
// the rendering is read from the same bytes the SDK decoded: rhea's decoder,
// which the SDK uses, is wrapped to keep the section it already read.
import { createRequire } from "node:module";
import { ServiceBusClient } from "@azure/service-bus";

const require = createRequire(import.meta.url);
const rhea = require("rhea");
const { types, message } = rhea;

const [mode, cs, queue, nText] = process.argv.slice(2);
const n = Number(nText);
if (!["send", "deadletter", "receive"].includes(mode) || !cs || !queue || !(n > 0)) {
  console.error("usage: node typed-props.mjs send|deadletter|receive CONNECTION_STRING QUEUE N");
  process.exit(2);
}

// The properties of message i (i makes each message's values differ).
function typedProps(i) {
  const u64 = Buffer.from("fedcba9876543210", "hex");
  const guid = Buffer.from(`0f8fad5b-d9cb-469f-a165-70867728950${i % 10}`.replace(/-/g, ""), "hex");
  const dec = Buffer.from("30400000000000000000000000003039", "hex");
  return {
    "p-string": `text ${i} é ✓`,
    "p-symbol": types.wrap_symbol(`sym-${i}`),
    "p-true": true,
    "p-false": false,
    "p-null": null,
    "p-ubyte": types.wrap_ubyte(200 + i),
    "p-byte": types.wrap_byte(-100 - i),
    "p-ushort": types.wrap_ushort(60000 + i),
    "p-short": types.wrap_short(-30000 - i),
    "p-uint": types.wrap_uint(4000000000 + i),
    "p-int": types.wrap_int(-2000000000 + i),
    "p-ulong": types.wrap_ulong(u64),
    "p-ulong-small": types.wrap_ulong(7 + i),
    "p-long": types.wrap_long(-9007199254740991 + i),
    "p-js-number": 42 + i,
    "p-float": types.wrap_float(1.5 + i),
    "p-double": 3.25 + i,
    "p-decimal128": types.Decimal128(dec),
    "p-char": types.wrap_char(0x1f600 + i),
    "p-timestamp": new Date(1700000000123 + i),
    "p-uuid": types.wrap_uuid(guid),
    "p-binary": Buffer.from([0, 1, 2, 0xfe, 0xff, i & 0xff]),
    "p-list": [1, "two", types.wrap_char(0x33), [types.wrap_ubyte(4)], { five: 5 }],
    "p-map": { a: types.wrap_ushort(1), b: ["x", types.wrap_ulong(u64)], c: { d: null } },
    "p-array": types.wrap_array([types.Int(1), types.Int(2), types.Int(3 + i)], 0x71),
    "p-timespan": types.wrap_described(types.wrap_long(36000000000 + i), "com.microsoft:timespan"),
    "p-datetimeoffset": types.wrap_described(types.wrap_long(638000000000000000 + i * 10000), "com.microsoft:datetime-offset"),
    "p-uri": types.wrap_described(`https://example.com/orders/${i}?q=1`, "com.microsoft:uri"),
    "p-described-ulong": types.wrap_described("tagged", 0x1234),
  };
}

const family = {
  True: "boolean", False: "boolean", Boolean: "boolean", Null: "null",
  Ubyte: "ubyte", Ushort: "ushort", Uint: "uint", SmallUint: "uint", Uint0: "uint",
  Ulong: "ulong", SmallUlong: "ulong", Ulong0: "ulong", Byte: "byte", Short: "short",
  Int: "int", SmallInt: "int", Long: "long", SmallLong: "long", Float: "float",
  Double: "double", Decimal32: "decimal32", Decimal64: "decimal64", Decimal128: "decimal128",
  CharUTF32: "char", Timestamp: "timestamp", Uuid: "uuid", Vbin8: "binary", Vbin32: "binary",
  Str8: "string", Str32: "string", Sym8: "symbol", Sym32: "symbol", List0: "list",
  List8: "list", List32: "list", Map8: "map", Map32: "map", Array8: "array", Array32: "array",
};

function valueText(v) {
  if (Buffer.isBuffer(v)) return v.toString("hex");
  if (v instanceof Date) return String(v.getTime());
  return String(v);
}

// The typed rendering of one decoded (still wrapped) value.
function render(o) {
  const t = family[o.type.name] ?? o.type.name;
  let out;
  if (Array.isArray(o.value)) out = { t, v: o.value.map(render) };
  else out = { t, v: valueText(o.value) };
  if (o.descriptor) out.d = render(o.descriptor);
  return out;
}

// Every application-properties section rhea decodes, kept by message id.
const seen = new Map();
const decode = message.decode;
message.decode = function (buffer) {
  const msg = decode.call(this, buffer);
  const reader = new types.Reader(buffer);
  while (reader.remaining()) {
    const s = reader.read();
    if (s.descriptor && Number(s.descriptor.value) === 0x74) {
      const props = {};
      for (let k = 0; k + 1 < s.value.length; k += 2) props[s.value[k].value] = render(s.value[k + 1]);
      seen.set(String(msg.message_id), props);
    }
  }
  return msg;
};

async function receive(receiver, count) {
  const out = [];
  const end = Date.now() + 30000;
  while (out.length < count && Date.now() < end) {
    out.push(...(await receiver.receiveMessages(count - out.length, { maxWaitTimeInMs: 2000 })));
  }
  if (out.length < count) throw new Error(`received ${out.length} of ${count} messages from ${queue}`);
  return out;
}

// The rendering of what a send puts on the wire, from rhea's own encoder.
function sentRendering(props) {
  const wire = types.wrap_map(props);
  const w = new types.Writer();
  w.write(wire);
  const back = new types.Reader(w.toBuffer()).read();
  const out = {};
  for (let k = 0; k + 1 < back.value.length; k += 2) out[back.value[k].value] = render(back.value[k + 1]);
  return out;
}

const sb = new ServiceBusClient(cs, { retryOptions: { maxRetries: 2, timeoutInMs: 20000 } });
try {
  if (mode === "send") {
    const sender = sb.createSender(queue);
    for (let i = 1; i <= n; i++) {
      const props = typedProps(i);
      await sender.sendMessages({ messageId: `typed-${i}`, body: { i }, applicationProperties: props });
      console.log(JSON.stringify({ message_id: `typed-${i}`, props: sentRendering(props) }));
    }
  } else {
    const receiver = sb.createReceiver(queue);
    for (const m of await receive(receiver, n)) {
      if (mode === "deadletter") {
        await receiver.deadLetterMessage(m, { deadLetterReason: "TypedProps", deadLetterErrorDescription: "test" });
      } else {
        await receiver.completeMessage(m);
        console.log(JSON.stringify({ message_id: String(m.messageId), props: seen.get(String(m.messageId)) ?? null }));
      }
    }
  }
} finally {
  await sb.close();
}
