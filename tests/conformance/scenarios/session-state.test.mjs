import { test } from "node:test";
import assert from "node:assert/strict";
import { client, sleep } from "../lib.mjs";

test("get/setSessionState round-trips and renewSessionLock extends the lock", async () => {
  const sb = client();
  try {
    await sb.createSender("q-sess-state").sendMessages({ body: "s", sessionId: "st" });
    const r = await sb.acceptSession("q-sess-state", "st", { maxAutoLockRenewalDurationInMs: 0 });
    assert.equal(await r.getSessionState(), null, "no state yet");
    await r.setSessionState({ step: 3 });
    assert.deepEqual(await r.getSessionState(), { step: 3 });
    const before = r.sessionLockedUntilUtc.getTime();
    await sleep(1200);
    const renewed = await r.renewSessionLock();
    assert.ok(renewed.getTime() >= before + 1000, "renewed lock is later");
    await r.close();
    const again = await sb.acceptSession("q-sess-state", "st");
    assert.deepEqual(await again.getSessionState(), { step: 3 }, "state outlives the receiver");
  } finally {
    await sb.close();
  }
});
