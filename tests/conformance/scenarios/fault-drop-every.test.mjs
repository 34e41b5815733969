// sbemu-args: --fault-drop-every-ms 1500
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { connectionString, readConnectionStats, sleep } from "../lib.mjs";

// A drop can hit any call in flight; the test retries its own sends so it
// asserts recovery, not the SDK's retry timing.
async function sendWithRetry(sender, msg) {
  for (let i = 0; ; i++) {
    try {
      return await sender.sendMessages(msg);
    } catch (e) {
      if (i >= 5) throw e;
      await sleep(200);
    }
  }
}

test("--fault-drop-every-ms: open connections are forced closed periodically and the SDK recovers", async () => {
  const sb = new ServiceBusClient(connectionString(), {
    retryOptions: { maxRetries: 5, retryDelayInMs: 200, timeoutInMs: 5000 },
  });
  const bodies = [];
  try {
    const r = sb.createReceiver("q-basic");
    const sub = r.subscribe({
      processMessage: async (m) => { bodies.push(m.body); },
      processError: async () => {},
    }, { autoCompleteMessages: true });
    const s = sb.createSender("q-basic");
    await sendWithRetry(s, { body: "before" });
    await sleep(3300);
    await sendWithRetry(s, { body: "after" });
    const both = () => bodies.includes("before") && bodies.includes("after");
    const end = Date.now() + 8000;
    while (!both() && Date.now() < end) await sleep(100);
    await sub.close().catch(() => {});
    await sleep(1100); // let the stats file catch up
    const conns = readConnectionStats();
    assert.ok(conns.forced_closed >= 2, `connections forced closed: ${conns.forced_closed}`);
    assert.ok(conns.accepted >= 2, `the SDK reconnected: ${conns.accepted} connections`);
    // At-least-once: a drop between delivery and complete may redeliver one.
    assert.deepEqual([...new Set(bodies)].sort(), ["after", "before"], "messages flow again after reconnecting");
  } finally {
    await sb.close().catch(() => {});
  }
});
