// send.mjs - sends N messages with the official @azure/service-bus SDK, each
// carrying a traceparent application property of a sender span of its own
// (trace id and span id printed, one JSON line per message).
//
//   node send.mjs CONNECTION_STRING ENTITY N PREFIX
import { ServiceBusClient } from "@azure/service-bus";
import { randomBytes } from "node:crypto";

const [cs, entity, n, prefix] = process.argv.slice(2);
const sb = new ServiceBusClient(cs, { retryOptions: { maxRetries: 2, timeoutInMs: 10000 } });
const sender = sb.createSender(entity);
const batch = [];
for (let i = 0; i < Number(n); i++) {
  const traceId = randomBytes(16).toString("hex");
  const spanId = randomBytes(8).toString("hex");
  const id = `${prefix}-${i}`;
  batch.push({ messageId: id, subject: "Item", contentType: "application/json",
               body: { id, n: i }, applicationProperties: { traceparent: `00-${traceId}-${spanId}-01` } });
  console.log(JSON.stringify({ message_id: id, trace_id: traceId, span_id: spanId }));
}
await sender.sendMessages(batch);
await sender.close();
await sb.close();
