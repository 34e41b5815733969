// peer-http.mjs - the benchmark's peer of an HTTP route: what a team would
// write with the official SDK instead of inboxd's HTTP route. For every
// message: a claim transaction (inbox row 'claimed' with a lease and a claim
// token; a unique violation is a duplicate, completed), a POST to the
// destination with the idempotency key (fetch), a finishing transaction
// (the row processed with the remote id and status, the business row), then
// complete. ServiceBusReceiver.subscribe in peek-lock, autoCompleteMessages
// off, maxConcurrentCalls C; the SDK renews the lock of a message it holds
// (maxAutoLockRenewalDurationInMs left at its default), as inboxd does.
//
//   node peer-http.mjs   (env: SB_CS, ENTITY, N, C, PGPORT, PGDATABASE, DEST)
// Prints one JSON line: {"messages", "seconds", "rate", "duplicates",
// "cpu_ms_per_1000", "peak_rss_mib"}. The clock starts at the first
// completed message, as for inboxd.
import { createHash, randomBytes } from "node:crypto";
import { ServiceBusClient } from "@azure/service-bus";
import pg from "pg";

const n = Number(process.env.N);
const c = Number(process.env.C);
const entity = process.env.ENTITY;
const dest = `${process.env.DEST}/charges`;
const pool = new pg.Pool({
  host: "127.0.0.1",
  port: Number(process.env.PGPORT),
  user: "postgres",
  database: process.env.PGDATABASE,
  max: c,
});
const CLAIM =
  "INSERT INTO inboxd_inbox (consumer, message_id, idempotency_key, body_sha256, status, entity, " +
  "sequence_number, delivery_count, enqueued_at, received_at, processed_at, lease_until, " +
  "claim_token, attempts) VALUES ($1, $2, $3, $4, 'claimed', $5, $6, $7, $8, now(), " +
  "clock_timestamp(), clock_timestamp() + interval '30 seconds', $9, 1)";
const FINISH =
  "UPDATE inboxd_inbox SET status = 'processed', remote_id = $1, remote_status = $2, " +
  "processed_at = clock_timestamp(), lease_until = NULL " +
  "WHERE consumer = $3 AND message_id = $4 AND status = 'claimed' AND claim_token = $5";
const ITEM = "INSERT INTO items (id, n, message_id) VALUES ($1, $2, $3)";

let done = 0;
let duplicates = 0;
let t0 = 0;
let finish;
const finished = new Promise((r) => (finish = r));

/* The claim in a transaction of its own; false when the row exists (a duplicate). */
async function claim(m, key, sha, token) {
  try {
    await pool.query({
      name: "claim",
      text: CLAIM,
      values: ["peerhttp", m.messageId, key, sha, entity, String(m.sequenceNumber),
        m.deliveryCount, m.enqueuedTimeUtc, token],
    });
    return true;
  } catch (e) {
    if (e.code !== "23505") throw e;
    duplicates++;
    return false;
  }
}

async function finishRow(m, body, token, remote) {
  const db = await pool.connect();
  try {
    await db.query("BEGIN");
    const r = await db.query({
      name: "finish",
      text: FINISH,
      values: [remote.id, remote.status, "peerhttp", m.messageId, token],
    });
    if (r.rowCount !== 1) throw new Error("claim taken over");
    await db.query({ name: "item", text: ITEM, values: [body.id, body.n, m.messageId] });
    await db.query("COMMIT");
  } catch (e) {
    await db.query("ROLLBACK").catch(() => {});
    throw e;
  } finally {
    db.release();
  }
}

async function apply(m) {
  const raw = Buffer.isBuffer(m.body) ? m.body : Buffer.from(JSON.stringify(m.body));
  const body = JSON.parse(raw.toString("utf8"));
  const sha = createHash("sha256").update(raw).digest("hex");
  const key = `item:${body.id}`;
  const token = randomBytes(16).toString("hex");
  if (!(await claim(m, key, sha, token))) return;
  const res = await fetch(dest, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key },
    body: raw,
    signal: AbortSignal.timeout(10000),
  });
  const answer = await res.json();
  if (res.status < 200 || res.status > 299) throw new Error(`HTTP ${res.status}`);
  await finishRow(m, body, token, { id: answer.id, status: res.status });
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
      console.error(`peer-http: ${args.errorSource}: ${args.error.message}`);
    },
  },
  { autoCompleteMessages: false, maxConcurrentCalls: c },
);
await finished;
const seconds = (performance.now() - t0) / 1000;
await receiver.close();
await sb.close();
await pool.end();
const cpu = process.cpuUsage();
console.log(JSON.stringify({
  messages: n, seconds, rate: (n - 1) / seconds, duplicates,
  cpu_ms_per_1000: ((cpu.user + cpu.system) / 1000 / n) * 1000,
  peak_rss_mib: process.resourceUsage().maxRSS / 1024,
}));
