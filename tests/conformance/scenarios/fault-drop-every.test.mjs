// sbemu-args: --fault-drop-every-ms 2000
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { closeQuietly, connectionString, readConnectionStats, sleep } from "../lib.mjs";

// A drop can hit any call in flight; the test retries its own calls so it
// asserts the broker's behaviour, not the SDK's retry timing.
async function retry(fn) {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (e) {
      if (i >= 8) throw e;
      await sleep(100);
    }
  }
}

test("--fault-drop-every-ms: open connections are forced closed periodically; clients reconnect", { timeout: 45000 }, async () => {
  const sb = new ServiceBusClient(connectionString(), {
    retryOptions: { maxRetries: 0, timeoutInMs: 3000 },
  });
  try {
    const s = sb.createSender("q-basic");
    await retry(() => s.sendMessages({ body: "before" }));
    await sleep(4500); // at least two drop periods with the sender's connection open
    const mid = readConnectionStats();
    assert.ok(mid.forced_closed >= 1, `an idle open connection was forced closed: ${JSON.stringify(mid)}`);
    await retry(() => s.sendMessages({ body: "after" }));
    const r = sb.createReceiver("q-basic", { receiveMode: "receiveAndDelete" });
    const bodies = [];
    const end = Date.now() + 15000;
    while (!(bodies.includes("before") && bodies.includes("after")) && Date.now() < end) {
      const got = await r.receiveMessages(2, { maxWaitTimeInMs: 1000 }).catch(() => []);
      bodies.push(...got.map((m) => m.body));
    }
    assert.deepEqual([...new Set(bodies)].sort(), ["after", "before"], "both messages stored and received");
    await sleep(1100); // let the stats file catch up
    const conns = readConnectionStats();
    assert.ok(conns.accepted >= 2, `the client reconnected: ${JSON.stringify(conns)}`);
    assert.ok(conns.forced_closed >= 1);
  } finally {
    await closeQuietly(sb);
  }
});
