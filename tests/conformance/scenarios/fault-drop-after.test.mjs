// sbemu-args: --fault-drop-after 2
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, closeQuietly, statsWhen, sleep } from "../lib.mjs";

test("--fault-drop-after: the connection is forced closed after 2 deliveries; locks survive and expire", async () => {
  const sb = client();
  try {
    await sb.createSender("q-expire").sendMessages([{ body: 1 }, { body: 2 }, { body: 3 }]);
    const r = sb.createReceiver("q-expire", { maxAutoLockRenewalDurationInMs: 0 });
    await assert.rejects(r.receiveMessages(3, { maxWaitTimeInMs: 2000 }),
      (e) => /ConnectionForced/.test(e.message) && e.retryable === true, "amqp:connection:forced reaches the SDK");
  } finally {
    await closeQuietly(sb);
  }
  const held = await statsWhen((s) => s["q-expire"].delivered === 2);
  assert.equal(held["q-expire"].delivered, 2, "exactly two deliveries before the drop");
  // The two locked messages come back when their 2 s lock expires.
  await sleep(2000);
  const st = await statsWhen((s) => s["q-expire"].active === 3 && s["q-expire"].locked === 0);
  assert.equal(st["q-expire"].active, 3);
  assert.equal(st["q-expire"].locked, 0);
});
