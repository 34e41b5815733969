import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, sleep } from "../lib.mjs";

test("renewMessageLock extends lockedUntil and keeps the message locked", async () => {
  const sb = client();
  try {
    await sb.createSender("q-renew").sendMessages({ body: "slow", messageId: "r-1" });
    const r = sb.createReceiver("q-renew", { maxAutoLockRenewalDurationInMs: 0 });
    const [m] = await receiveN(r, 1);
    const first = m.lockedUntilUtc.getTime();
    await sleep(1500);
    const renewed = await r.renewMessageLock(m);
    assert.ok(renewed.getTime() >= first + 1000, `renewed ${renewed.toISOString()} > ${new Date(first).toISOString()}`);
    await sleep(4000); // past the original 5 s lock, inside the renewed one
    await r.completeMessage(m);
  } finally {
    await sb.close();
  }
});
