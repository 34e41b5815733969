import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("defer hides the message; receiveDeferredMessages and complete settle it via $management", async () => {
  const sb = client();
  try {
    await sb.createSender("q-defer").sendMessages({ body: "wait", messageId: "f-1" });
    const r = sb.createReceiver("q-defer");
    const [m] = await receiveN(r, 1);
    await r.deferMessage(m);
    const none = await r.receiveMessages(1, { maxWaitTimeInMs: 500 });
    assert.equal(none.length, 0, "deferred is invisible to receive");
    const [d] = await r.receiveDeferredMessages(m.sequenceNumber);
    assert.equal(d.messageId, "f-1");
    await r.completeMessage(d);
    await assert.rejects(r.receiveDeferredMessages(m.sequenceNumber));
  } finally {
    await sb.close();
  }
});
