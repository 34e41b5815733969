// Shared helpers of the conformance scenarios: a client for the running
// sbemu, the stats file, and small waits.
import { ServiceBusClient } from "@azure/service-bus";
import { readFileSync } from "node:fs";

export const port = process.env.SBEMU_PORT;
export const keyName = process.env.SBEMU_KEY_NAME;
export const key = process.env.SBEMU_KEY;

export function connectionString(k = key) {
  return `Endpoint=sb://127.0.0.1:${port}/;SharedAccessKeyName=${keyName};SharedAccessKey=${k};UseDevelopmentEmulator=true`;
}

// No retries: a failure must surface at once, not after 30 s back-offs.
export function client(opts = {}) {
  return new ServiceBusClient(connectionString(opts.key), {
    retryOptions: { maxRetries: 0, timeoutInMs: opts.timeoutInMs ?? 10000 },
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function readStats() {
  return JSON.parse(readFileSync(process.env.SBEMU_STATS, "utf8")).entities;
}

export function readConnectionStats() {
  return JSON.parse(readFileSync(process.env.SBEMU_STATS, "utf8")).connections;
}

// Polls the stats file (rewritten every second) until pred(entities) holds.
export async function statsWhen(pred, timeoutMs = 4000) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = readStats();
      if (pred(last)) return last;
    } catch {
      /* not written yet */
    }
    if (Date.now() > end) return last;
    await sleep(200);
  }
}

// Receives until count messages arrived or maxWaitMs passed.
export async function receiveN(receiver, count, maxWaitMs = 5000) {
  const out = [];
  const end = Date.now() + maxWaitMs;
  while (out.length < count && Date.now() < end) {
    const got = await receiver.receiveMessages(count - out.length, {
      maxWaitTimeInMs: Math.max(100, end - Date.now()),
    });
    out.push(...got);
  }
  return out;
}

// Closes a client whose connection a fault may have dropped mid-close: the
// SDK can leave that promise pending forever, so bound the wait.
export async function closeQuietly(sb, ms = 3000) {
  await Promise.race([sb.close().catch(() => {}), sleep(ms)]);
}
