import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("abandon redelivers at once with deliveryCount 1", async () => {
  const sb = client();
  try {
    await sb.createSender("q-abandon").sendMessages({ body: "again", messageId: "a-1" });
    const r = sb.createReceiver("q-abandon");
    const [m] = await receiveN(r, 1);
    assert.equal(m.deliveryCount, 0);
    await r.abandonMessage(m);
    const [m2] = await receiveN(r, 1, 2000);
    assert.ok(m2, "redelivered");
    assert.equal(m2.messageId, "a-1");
    assert.equal(m2.deliveryCount, 1);
    assert.notEqual(m2.lockToken, m.lockToken, "a new lock token per delivery");
    await r.completeMessage(m2);
    const st = await statsWhen((s) => s["q-abandon"].completed === 1);
    assert.equal(st["q-abandon"].abandoned, 1);
    assert.equal(st["q-abandon"].delivered, 2);
  } finally {
    await sb.close();
  }
});
