// sbemu-args: --fault-refuse-renew 1
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("--fault-refuse-renew: the first renew-lock fails with MessageLockLost, the next succeeds", async () => {
  const sb = client();
  try {
    await sb.createSender("q-renew").sendMessages({ body: "x", messageId: "fr-1" });
    const r = sb.createReceiver("q-renew", { maxAutoLockRenewalDurationInMs: 0 });
    const [m] = await receiveN(r, 1);
    await assert.rejects(r.renewMessageLock(m), (e) => e.code === "MessageLockLost");
    const until = await r.renewMessageLock(m);
    assert.ok(until.getTime() > Date.now());
    await r.completeMessage(m);
  } finally {
    await sb.close();
  }
});
