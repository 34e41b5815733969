import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, sleep } from "../lib.mjs";

test("a lock left to expire redelivers with deliveryCount 1, and the old lock is lost", async () => {
  const sb = client();
  try {
    await sb.createSender("q-expire").sendMessages({ body: "late", messageId: "e-1" });
    const r = sb.createReceiver("q-expire", { maxAutoLockRenewalDurationInMs: 0 });
    const [m] = await receiveN(r, 1);
    await sleep(2600); // lock duration is 2 s
    const [m2] = await receiveN(r, 1);
    assert.ok(m2, "redelivered after expiry");
    assert.equal(m2.messageId, "e-1");
    assert.equal(m2.deliveryCount, 1);
    await assert.rejects(r.completeMessage(m), (e) => e.code === "MessageLockLost");
    await r.completeMessage(m2);
  } finally {
    await sb.close();
  }
});
