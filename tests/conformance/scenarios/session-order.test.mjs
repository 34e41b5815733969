import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("order within a session is kept, also across an abandon", async () => {
  const sb = client();
  try {
    const msgs = [];
    for (let i = 0; i < 10; i++) msgs.push({ body: i, sessionId: i % 2 ? "odd" : "even" });
    await sb.createSender("q-sess-order").sendMessages(msgs);
    const r = await sb.acceptSession("q-sess-order", "odd");
    const [first] = await receiveN(r, 1);
    assert.equal(first.body, 1);
    await r.abandonMessage(first);
    const got = await receiveN(r, 5);
    assert.deepEqual(got.map((m) => m.body), [1, 3, 5, 7, 9]);
    assert.equal(got[0].deliveryCount, 1);
    for (const m of got) await r.completeMessage(m);
  } finally {
    await sb.close();
  }
});
