import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("MaxDeliveryCount exhausted moves the message to the DLQ with MaxDeliveryCountExceeded", async () => {
  const sb = client();
  try {
    await sb.createSender("q-maxdc").sendMessages({ body: "poison", messageId: "p-1" });
    const r = sb.createReceiver("q-maxdc");
    for (let i = 0; i < 2; i++) {
      const [m] = await receiveN(r, 1, 3000);
      assert.ok(m, `delivery ${i + 1}`);
      assert.equal(m.deliveryCount, i);
      await r.abandonMessage(m);
    }
    const none = await r.receiveMessages(1, { maxWaitTimeInMs: 500 });
    assert.equal(none.length, 0, "not delivered a third time");
    const d = sb.createReceiver("q-maxdc", { subQueueType: "deadLetter" });
    const [dm] = await receiveN(d, 1);
    assert.equal(dm.messageId, "p-1");
    assert.equal(dm.deadLetterReason, "MaxDeliveryCountExceeded");
    await d.completeMessage(dm);
    const st = await statsWhen((s) => s["q-maxdc"].dead_lettered === 1);
    assert.deepEqual(st["q-maxdc"].dead_lettered_by_reason, { MaxDeliveryCountExceeded: 1 });
  } finally {
    await sb.close();
  }
});
