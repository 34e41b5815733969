// sbemu-args: --fault-drop-every-ms 1000
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { connectionString, readConnectionStats, sleep } from "../lib.mjs";

test("--fault-drop-every-ms: open connections are forced closed periodically and the SDK recovers", async () => {
  const sb = new ServiceBusClient(connectionString(), {
    retryOptions: { maxRetries: 5, retryDelayInMs: 200, timeoutInMs: 5000 },
  });
  const errors = [];
  const bodies = [];
  try {
    const r = sb.createReceiver("q-basic");
    const sub = r.subscribe({
      processMessage: async (m) => { bodies.push(m.body); },
      processError: async (args) => { errors.push(args.error); },
    }, { autoCompleteMessages: true });
    const s = sb.createSender("q-basic");
    await s.sendMessages({ body: "before" });
    await sleep(2600);
    await s.sendMessages({ body: "after" });
    const end = Date.now() + 5000;
    while (bodies.length < 2 && Date.now() < end) await sleep(100);
    await sub.close();
    await sleep(1100); // let the stats file catch up
    const conns = readConnectionStats();
    assert.ok(conns.forced_closed >= 2, `connections forced closed: ${conns.forced_closed}`);
    assert.ok(conns.accepted >= 2, `the SDK reconnected: ${conns.accepted} connections`);
    assert.deepEqual(bodies.sort(), ["after", "before"], "messages flow again after reconnecting");
  } finally {
    await sb.close();
  }
});
