import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("send and receive in peek-lock: body, properties, lock token and broker annotations", async () => {
  const sb = client();
  try {
    const before = Date.now();
    await sb.createSender("q-basic").sendMessages({
      body: { order: 42 }, messageId: "m-1", subject: "order-placed", correlationId: "c-1",
      applicationProperties: { type: "order" },
    });
    const r = sb.createReceiver("q-basic");
    const [m] = await receiveN(r, 1);
    assert.ok(m, "a message arrives");
    assert.deepEqual(m.body, { order: 42 });
    assert.equal(m.messageId, "m-1");
    assert.equal(m.subject, "order-placed");
    assert.equal(m.correlationId, "c-1");
    assert.equal(m.applicationProperties.type, "order");
    assert.equal(m.deliveryCount, 0);
    assert.match(m.lockToken, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(Number(m.sequenceNumber), 1);
    assert.ok(m.enqueuedTimeUtc.getTime() >= before - 1000, "enqueued time is now");
    assert.ok(m.lockedUntilUtc.getTime() > Date.now() + 2000, "locked for the lock duration");
    await r.completeMessage(m);
  } finally {
    await sb.close();
  }
});
