import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, sleep } from "../lib.mjs";

test("a session lock left to expire detaches the receiver; the message returns with deliveryCount 1", async () => {
  const sb = client();
  try {
    await sb.createSender("q-sess-expire").sendMessages({ body: "s", sessionId: "X", messageId: "sx-1" });
    const r = await sb.acceptSession("q-sess-expire", "X", { maxAutoLockRenewalDurationInMs: 0 });
    const [m] = await receiveN(r, 1);
    assert.equal(m.deliveryCount, 0);
    await sleep(2600); // session lock is 2 s
    await assert.rejects(r.completeMessage(m), (e) => e.code === "SessionLockLost");
    const again = await sb.acceptSession("q-sess-expire", "X");
    const [m2] = await receiveN(again, 1);
    assert.equal(m2.messageId, "sx-1");
    assert.equal(m2.deliveryCount, 1);
    await again.completeMessage(m2);
  } finally {
    await sb.close();
  }
});
