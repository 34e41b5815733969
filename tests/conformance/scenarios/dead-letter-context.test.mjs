import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

// inboxd dead-letters with its context as properties to modify (strings and
// integers); the SDK reading the DLQ must see them beside the message's own
// properties, and a replay - a re-send with the same message id, then the
// completion of the DLQ copy - must leave one copy in the queue, none in the DLQ.
test("dead-letter context properties reach the SDK, and a replay round trip works", async () => {
  const sb = client();
  try {
    await sb.createSender("q-dlq").sendMessages({ body: { id: "o-1", amount: -5 }, messageId: "ctx-1",
      subject: "Refund", correlationId: "c-1", applicationProperties: { tenant: "t1" } });
    const r = sb.createReceiver("q-dlq");
    const [m] = await receiveN(r, 1);
    await r.deadLetterMessage(m, {
      deadLetterReason: "HandlerError",
      deadLetterErrorDescription: "SQLSTATE 23514, native 1: check constraint",
      "inboxd-consumer": "billing",
      "inboxd-error-class": "permanent",
      "inboxd-sqlstate": "23514",
      "inboxd-native-error": 1,
      "inboxd-attempts": 1,
      "inboxd-route": 0,
      "inboxd-failed-at": "2026-12-03T08:00:00.000Z",
    });
    const d = sb.createReceiver("q-dlq", { subQueueType: "deadLetter" });
    const [dm] = await receiveN(d, 1);
    assert.equal(dm.messageId, "ctx-1");
    assert.equal(dm.deadLetterReason, "HandlerError");
    const p = dm.applicationProperties;
    assert.equal(p.tenant, "t1");
    assert.equal(p["inboxd-consumer"], "billing");
    assert.equal(p["inboxd-error-class"], "permanent");
    assert.equal(p["inboxd-sqlstate"], "23514");
    assert.equal(p["inboxd-native-error"], 1);
    assert.equal(p["inboxd-attempts"], 1);
    assert.equal(p["inboxd-route"], 0);
    assert.equal(p["inboxd-failed-at"], "2026-12-03T08:00:00.000Z");

    const props = { ...p, "inboxd-replay-count": 1 };
    delete props.DeadLetterReason;
    delete props.DeadLetterErrorDescription;
    await sb.createSender("q-dlq").sendMessages({ body: dm.body, messageId: dm.messageId,
      subject: dm.subject, correlationId: dm.correlationId, applicationProperties: props });
    await d.completeMessage(dm);
    const [again] = await receiveN(r, 1);
    assert.equal(again.messageId, "ctx-1");
    assert.equal(again.subject, "Refund");
    assert.equal(again.correlationId, "c-1");
    assert.deepEqual(again.body, { id: "o-1", amount: -5 });
    assert.equal(again.applicationProperties["inboxd-replay-count"], 1);
    assert.equal(again.applicationProperties["inboxd-error-class"], "permanent");
    await r.completeMessage(again);
    const st = await statsWhen((s) => s["q-dlq"].completed === 1 && s["q-dlq/$DeadLetterQueue"].completed === 1);
    assert.equal(st["q-dlq/$DeadLetterQueue"].active, 0);
    assert.equal(st["q-dlq"].active, 0);
    assert.equal(st["q-dlq"].sent, 2);
  } finally {
    await sb.close();
  }
});
