// peer.mjs - the benchmark's peer: what a team would write with the
// official SDK instead of inboxd. ServiceBusReceiver.subscribe in peek-lock
// with autoCompleteMessages off, a node-postgres pool, and for every message
// the same inbox transaction as inboxd (inbox row with the body's SHA-256
// and the idempotency key, the business row, COMMIT; a unique violation is a
// duplicate, rolled back and completed), then complete after COMMIT.
//
//   node peer.mjs   (env: SB_CS, ENTITY, N, C, PGPORT, PGDATABASE)
// Prints one JSON line: {"messages":N,"seconds":S,"rate":R,"duplicates":D}.
// The clock starts at the first completed message, as for inboxd and as
// pgbench leaves out its connections: the rate is of the N - 1 after it.
import { createHash } from "node:crypto";
import { ServiceBusClient } from "@azure/service-bus";
import pg from "pg";

const n = Number(process.env.N);
const c = Number(process.env.C);
const entity = process.env.ENTITY;
const pool = new pg.Pool({
  host: "127.0.0.1",
  port: Number(process.env.PGPORT),
  user: "postgres",
  database: process.env.PGDATABASE,
  max: c,
});
const INBOX =
  "INSERT INTO inboxd_inbox (consumer, message_id, idempotency_key, body_sha256, status, entity, " +
  "sequence_number, delivery_count, enqueued_at, received_at, processed_at) " +
  "VALUES ($1, $2, $3, $4, 'processed', $5, $6, $7, $8, now(), clock_timestamp())";
const ITEM = "INSERT INTO items (id, n, message_id) VALUES ($1, $2, $3)";

let done = 0;
let duplicates = 0;
let t0 = 0;
let finish;
const finished = new Promise((r) => (finish = r));

async function apply(m) {
  const raw = Buffer.isBuffer(m.body) ? m.body : Buffer.from(JSON.stringify(m.body));
  const body = JSON.parse(raw.toString("utf8"));
  const sha = createHash("sha256").update(raw).digest("hex");
  const db = await pool.connect();
  try {
    await db.query("BEGIN");
    try {
      await db.query({
        name: "inbox",
        text: INBOX,
        values: ["peer", m.messageId, `item:${body.id}`, sha, entity,
          String(m.sequenceNumber), m.deliveryCount, m.enqueuedTimeUtc],
      });
    } catch (e) {
      await db.query("ROLLBACK");
      if (e.code !== "23505") throw e;
      duplicates++;
      return;
    }
    await db.query({ name: "item", text: ITEM, values: [body.id, body.n, m.messageId] });
    await db.query("COMMIT");
  } catch (e) {
    await db.query("ROLLBACK").catch(() => {});
    throw e;
  } finally {
    db.release();
  }
}

const sb = new ServiceBusClient(process.env.SB_CS);
const receiver = sb.createReceiver(entity, { receiveMode: "peekLock", skipParsingBodyAsJson: true });
receiver.subscribe(
  {
    async processMessage(m) {
      await apply(m);
      await receiver.completeMessage(m);
      if (++done === 1) t0 = performance.now();
      if (done === n) finish();
    },
    async processError(args) {
      console.error(`peer: ${args.errorSource}: ${args.error.message}`);
    },
  },
  { autoCompleteMessages: false, maxConcurrentCalls: c },
);
await finished;
const seconds = (performance.now() - t0) / 1000;
await receiver.close();
await sb.close();
await pool.end();
console.log(JSON.stringify({ messages: n, seconds, rate: (n - 1) / seconds, duplicates }));
