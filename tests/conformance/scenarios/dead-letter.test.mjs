import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("deadLetter moves the message to the DLQ with reason and description", async () => {
  const sb = client();
  try {
    await sb.createSender("q-dlq").sendMessages({ body: { bad: true }, messageId: "d-1" });
    const r = sb.createReceiver("q-dlq");
    const [m] = await receiveN(r, 1);
    await r.deadLetterMessage(m, { deadLetterReason: "NoRoute", deadLetterErrorDescription: "no route for type x" });
    const none = await r.receiveMessages(1, { maxWaitTimeInMs: 500 });
    assert.equal(none.length, 0, "gone from the queue");
    const d = sb.createReceiver("q-dlq", { subQueueType: "deadLetter" });
    const [dm] = await receiveN(d, 1);
    assert.ok(dm, "in the DLQ");
    assert.equal(dm.messageId, "d-1");
    assert.deepEqual(dm.body, { bad: true });
    assert.equal(dm.deadLetterReason, "NoRoute");
    assert.equal(dm.deadLetterErrorDescription, "no route for type x");
    await d.completeMessage(dm);
    const st = await statsWhen((s) => s["q-dlq/$DeadLetterQueue"].completed === 1);
    assert.equal(st["q-dlq"].dead_lettered, 1);
    assert.deepEqual(st["q-dlq"].dead_lettered_by_reason, { NoRoute: 1 });
    assert.equal(st["q-dlq/$DeadLetterQueue"].active, 0);
  } finally {
    await sb.close();
  }
});
