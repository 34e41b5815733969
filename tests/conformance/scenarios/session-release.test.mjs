import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen, sleep } from "../lib.mjs";

test("a session given back with messages in it is available again at once, in order, delivery counts unchanged", async () => {
  const sb = client({ timeoutInMs: 5000 });
  const other = client({ timeoutInMs: 5000 });
  try {
    await sb.createSender("q-sess-release").sendMessages(
      ["r1", "r2", "r3", "r4"].map((body) => ({ body, sessionId: "R" })));
    const r1 = await sb.acceptNextSession("q-sess-release");
    assert.equal(r1.sessionId, "R");
    const got = await receiveN(r1, 2);
    assert.deepEqual(got.map((m) => m.body), ["r1", "r2"]);
    await r1.completeMessage(got[0]);
    await r1.close(); // r2 delivered but unsettled, r3 and r4 never delivered

    const held = await statsWhen((s) => s["q-sess-release"].sessions_held === 0);
    assert.equal(held["q-sess-release"].sessions_held, 0, "closing gave the session back");
    const started = Date.now();
    const r2 = await other.acceptNextSession("q-sess-release");
    assert.equal(r2.sessionId, "R");
    assert.ok(Date.now() - started < 2000, "accepted at once, not after the lock ran out");
    const rest = await receiveN(r2, 3);
    assert.deepEqual(rest.map((m) => m.body), ["r2", "r3", "r4"]);
    assert.equal(rest[0].deliveryCount, 0, "closing a session does not count a delivery");
    for (const m of rest) await r2.completeMessage(m);
    await r2.close();
    const st = await statsWhen((s) => s["q-sess-release"].completed === 4 &&
      s["q-sess-release"].sessions_held === 0);
    assert.equal(st["q-sess-release"].completed, 4);
    assert.equal(st["q-sess-release"].sessions_held, 0, "no session is held after both closed");
  } finally {
    await sb.close();
    await other.close();
  }
});

test("a session given back empty is accepted again when a new message arrives", async () => {
  const sb = client({ timeoutInMs: 10000 });
  try {
    const sender = sb.createSender("q-sess-release");
    await sender.sendMessages({ body: "s1", sessionId: "S" });
    const r1 = await sb.acceptNextSession("q-sess-release");
    const [m1] = await receiveN(r1, 1);
    await r1.completeMessage(m1);
    await r1.close();

    // New message, then accept: the same session again.
    await sender.sendMessages({ body: "s2", sessionId: "S" });
    const r2 = await sb.acceptNextSession("q-sess-release");
    assert.equal(r2.sessionId, "S");
    const [m2] = await receiveN(r2, 1);
    assert.equal(m2.body, "s2");
    await r2.completeMessage(m2);
    await r2.close();

    // Accept first (it waits), then the new message: the waiting accept gets it.
    const waiting = sb.acceptNextSession("q-sess-release");
    await sleep(300);
    const sent = Date.now();
    await sender.sendMessages({ body: "s3", sessionId: "S" });
    const r3 = await waiting;
    assert.equal(r3.sessionId, "S");
    assert.ok(Date.now() - sent < 2000, "the waiting accept was answered when the message arrived");
    const [m3] = await receiveN(r3, 1);
    assert.equal(m3.body, "s3");
    await r3.completeMessage(m3);
    await r3.close();
  } finally {
    await sb.close();
  }
});
