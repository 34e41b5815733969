// What each "give it back" outcome does to the delivery count, as Service Bus
// documents it (azure-docs service-bus-java-how-to-use-jms-api-amqp.md, "AMQP
// disposition and Service Bus operation mapping"): released only unlocks the
// message; modified with delivery-failed is Abandon() and counts a delivery;
// modified with undeliverable-here is Defer(). The SDK's public API only
// sends modified (abandon, defer), so released and modified{delivery-failed}
// are sent through the SDK's own receive link (the rhea delivery it keeps on
// each received message), on the same wire the SDK uses.
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("released never counts a delivery, modified{delivery-failed} does", async () => {
  const sb = client();
  try {
    await sb.createSender("q-release").sendMessages({ body: "back", messageId: "rel-1" });
    const r = sb.createReceiver("q-release");
    // MaxDeliveryCount is 2: three releases in a row must not dead-letter it.
    for (let i = 0; i < 3; i++) {
      const [m] = await receiveN(r, 1, 3000);
      assert.ok(m, `delivery ${i + 1} after ${i} releases`);
      assert.equal(m.messageId, "rel-1");
      assert.equal(m.deliveryCount, 0, "released does not count a failed delivery");
      m.delivery.release();
    }
    const [m1] = await receiveN(r, 1, 3000);
    assert.equal(m1.deliveryCount, 0);
    m1.delivery.modified({ delivery_failed: true, undeliverable_here: false });
    const [m2] = await receiveN(r, 1, 3000);
    assert.ok(m2, "modified{delivery-failed} makes it available again at once");
    assert.equal(m2.deliveryCount, 1, "modified{delivery-failed} counts one delivery");
    // The second counted failure reaches MaxDeliveryCount 2: dead-lettered.
    m2.delivery.modified({ delivery_failed: true });
    const st = await statsWhen((s) => s["q-release"].dead_lettered === 1);
    assert.equal(st["q-release"].released, 3);
    assert.equal(st["q-release"].abandoned, 2);
    assert.equal(st["q-release"].dead_lettered, 1);
    assert.equal(st["q-release"].active + st["q-release"].locked, 0);
  } finally {
    await sb.close();
  }
});

test("modified{delivery-failed, undeliverable-here} defers", async () => {
  const sb = client();
  try {
    await sb.createSender("q-defer").sendMessages({ body: "later", messageId: "def-x" });
    const r = sb.createReceiver("q-defer");
    const [m] = await receiveN(r, 1, 3000);
    assert.ok(m);
    m.delivery.modified({ delivery_failed: true, undeliverable_here: true });
    const st = await statsWhen((s) => s["q-defer"].deferred === 1);
    assert.equal(st["q-defer"].deferred, 1);
    const [again] = await receiveN(r, 1, 1500);
    assert.equal(again, undefined, "a deferred message is not handed out again");
    const [d] = await r.receiveDeferredMessages(m.sequenceNumber);
    assert.equal(d.messageId, "def-x");
    assert.equal(d.deliveryCount, 0, "deferring does not count a delivery");
    await r.completeMessage(d);
  } finally {
    await sb.close();
  }
});
