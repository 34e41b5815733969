import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("complete removes the message", async () => {
  const sb = client();
  try {
    await sb.createSender("q-basic").sendMessages({ body: "done", messageId: "c-1" });
    const r = sb.createReceiver("q-basic");
    const [m] = await receiveN(r, 1);
    await r.completeMessage(m);
    const more = await r.receiveMessages(1, { maxWaitTimeInMs: 1000 });
    assert.equal(more.length, 0, "nothing left to receive");
    const peeked = await r.peekMessages(10);
    assert.equal(peeked.length, 0, "nothing left to peek");
    const st = await statsWhen((s) => s["q-basic"].completed === 1);
    assert.equal(st["q-basic"].completed, 1);
    assert.equal(st["q-basic"].active, 0);
    assert.equal(st["q-basic"].locked, 0);
    await assert.rejects(r.completeMessage(m), "a second complete is refused");
  } finally {
    await sb.close();
  }
});
