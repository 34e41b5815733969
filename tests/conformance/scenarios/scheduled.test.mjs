import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("a scheduled message is not delivered before its time", async () => {
  const sb = client();
  try {
    const s = sb.createSender("q-sched");
    const at = new Date(Date.now() + 2500);
    const [seq] = await s.scheduleMessages({ body: "later", messageId: "s-1" }, at);
    assert.ok(Number(seq) > 0);
    const cancelled = await s.scheduleMessages({ body: "never" }, new Date(Date.now() + 2000));
    await s.cancelScheduledMessages(cancelled);
    const r = sb.createReceiver("q-sched");
    const early = await r.receiveMessages(1, { maxWaitTimeInMs: 1000 });
    assert.equal(early.length, 0, "not yet");
    const peeked = await r.peekMessages(5);
    assert.equal(peeked.length, 1, "visible to peek as scheduled");
    const [m] = await receiveN(r, 1, 5000);
    assert.ok(m, "delivered after its time");
    assert.equal(m.body, "later");
    assert.ok(Date.now() >= at.getTime() - 100);
    await r.completeMessage(m);
    const none = await r.receiveMessages(1, { maxWaitTimeInMs: 500 });
    assert.equal(none.length, 0, "the cancelled one never comes");
  } finally {
    await sb.close();
  }
});
