import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("abandon and deadLetter apply propertiesToModify to the message", async () => {
  const sb = client();
  try {
    await sb.createSender("q-abandon").sendMessages({ body: "m", messageId: "pm-1",
      applicationProperties: { keep: "k", attempt: 0 } });
    const r = sb.createReceiver("q-abandon");
    const [m] = await receiveN(r, 1);
    await r.abandonMessage(m, { attempt: 1, lastError: "timeout" });
    const [m2] = await receiveN(r, 1);
    assert.deepEqual(m2.applicationProperties, { keep: "k", attempt: 1, lastError: "timeout" });
    await r.deadLetterMessage(m2, { deadLetterReason: "Poison", deadLetterErrorDescription: "bad", stage: "final" });
    const d = sb.createReceiver("q-abandon", { subQueueType: "deadLetter" });
    const [dm] = await receiveN(d, 1);
    assert.equal(dm.deadLetterReason, "Poison");
    assert.equal(dm.applicationProperties.stage, "final");
    assert.equal(dm.applicationProperties.attempt, 1);
    assert.equal(dm.deliveryCount, 1);
    await d.completeMessage(dm);
  } finally {
    await sb.close();
  }
});
