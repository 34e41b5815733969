import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, sleep } from "../lib.mjs";

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

test("session state is kept per session, outlives its messages, and clears to null", async () => {
  const sb = client();
  try {
    const sender = sb.createSender("q-sess-state");
    await sender.sendMessages([
      { body: "a1", sessionId: "st-a" },
      { body: "b1", sessionId: "st-b" },
    ]);
    const a = await sb.acceptSession("q-sess-state", "st-a", { maxAutoLockRenewalDurationInMs: 0 });
    await a.setSessionState({ parked: true, why: "poison" });
    // The session's only message leaves; the state stays with the session.
    const [m] = await receiveN(a, 1);
    assert.equal(m.body, "a1");
    await a.completeMessage(m);
    await a.close();
    const b = await sb.acceptSession("q-sess-state", "st-b", { maxAutoLockRenewalDurationInMs: 0 });
    assert.equal(await b.getSessionState(), null, "another session's state is its own");
    await b.close();
    const a2 = await sb.acceptSession("q-sess-state", "st-a", { maxAutoLockRenewalDurationInMs: 0 });
    assert.deepEqual(await a2.getSessionState(), { parked: true, why: "poison" },
      "state of a session without messages survives its release");
    await a2.setSessionState(null);
    assert.equal(await a2.getSessionState(), null, "cleared");
    await a2.close();
    const a3 = await sb.acceptSession("q-sess-state", "st-a", { maxAutoLockRenewalDurationInMs: 0 });
    assert.equal(await a3.getSessionState(), null, "stays cleared after a release");
    await a3.close();
  } finally {
    await sb.close();
  }
});
