// sbemu-args: --fault-lock-early-ms 3000
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, sleep } from "../lib.mjs";

test("--fault-lock-early-ms: the lock is gone before the announced lockedUntil", async () => {
  const sb = client();
  try {
    await sb.createSender("q-basic").sendMessages({ body: "early" });
    const r = sb.createReceiver("q-basic", { maxAutoLockRenewalDurationInMs: 0 });
    const [m] = await receiveN(r, 1);
    await sleep(2300); // announced 5 s, real 2 s
    assert.ok(m.lockedUntilUtc.getTime() > Date.now(), "still announced as locked");
    await assert.rejects(r.completeMessage(m), (e) => e.code === "MessageLockLost");
    const [again] = await receiveN(r, 1);
    assert.equal(again.deliveryCount, 1);
    await r.completeMessage(again);
  } finally {
    await sb.close();
  }
});
