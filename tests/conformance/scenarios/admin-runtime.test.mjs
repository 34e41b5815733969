// sbemu-tls
// sbemu-http
// The HTTPS management endpoint as the SDK's ServiceBusAdministrationClient
// reads it: runtime counts of a queue and a subscription follow what the
// broker holds (stats file), the queue's description carries its options,
// a bad key is 401 and an unknown entity is "not found".
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusAdministrationClient } from "@azure/service-bus";
import { client, key, keyName, receiveN, statsWhen } from "../lib.mjs";

function admin(k = key) {
  return new ServiceBusAdministrationClient(
    `Endpoint=sb://localhost:${process.env.SBEMU_HTTP_PORT}/;SharedAccessKeyName=${keyName};SharedAccessKey=${k}`
  );
}

test("queue and subscription runtime properties follow the broker", async () => {
  const sb = client();
  const adm = admin();
  try {
    const s = sb.createSender("q-admin");
    for (let i = 0; i < 4; i++) await s.sendMessages({ body: `m${i}`, messageId: `a-${i}` });
    await s.scheduleMessages({ body: "later", messageId: "a-later" }, new Date(Date.now() + 3600e3));
    const r = sb.createReceiver("q-admin");
    const [first] = await receiveN(r, 1);
    await r.deadLetterMessage(first, { deadLetterReason: "Test", deadLetterErrorDescription: "one" });
    const [held] = await receiveN(r, 1); // stays locked: still an active message
    assert.ok(held);
    const st = await statsWhen((x) => x["q-admin/$DeadLetterQueue"].active === 1 && x["q-admin"].locked === 1);
    const q = await adm.getQueueRuntimeProperties("q-admin");
    assert.equal(q.name, "q-admin");
    assert.equal(q.activeMessageCount, st["q-admin"].active + st["q-admin"].locked);
    assert.equal(q.activeMessageCount, 3);
    assert.equal(q.deadLetterMessageCount, 1);
    assert.equal(q.scheduledMessageCount, 1);
    assert.equal(q.transferDeadLetterMessageCount, 0);
    assert.equal(q.totalMessageCount, 5);
    assert.ok(q.createdAt instanceof Date && !isNaN(q.createdAt));

    const desc = await adm.getQueue("q-admin");
    assert.equal(desc.name, "q-admin");
    assert.equal(desc.maxDeliveryCount, 3);
    assert.equal(desc.lockDuration, "PT1M30S");
    assert.equal(desc.requiresSession, false);

    await sb.createSender("events").sendMessages([{ body: 1 }, { body: 2 }]);
    await statsWhen((x) => x["events/Subscriptions/billing"].active === 2);
    const sub = await adm.getSubscriptionRuntimeProperties("events", "billing");
    assert.equal(sub.topicName, "events");
    assert.equal(sub.subscriptionName, "billing");
    assert.equal(sub.activeMessageCount, 2);
    assert.equal(sub.deadLetterMessageCount, 0);
    assert.equal(sub.totalMessageCount, 2);
  } finally {
    await sb.close();
  }
});

test("a wrong key is 401 and an unknown entity is not found", async () => {
  await assert.rejects(admin("d3Jvbmcta2V5").getQueueRuntimeProperties("q-admin"), (e) => {
    assert.equal(e.statusCode, 401);
    assert.equal(e.code, "UnauthorizedRequestError");
    return true;
  });
  await assert.rejects(admin().getQueueRuntimeProperties("no-such-queue"), (e) => {
    assert.equal(e.code, "MessageEntityNotFoundError");
    return true;
  });
});
