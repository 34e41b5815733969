import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("receiveAndDelete removes on delivery", async () => {
  const sb = client();
  try {
    await sb.createSender("q-rad").sendMessages([{ body: 1 }, { body: 2 }]);
    const r = sb.createReceiver("q-rad", { receiveMode: "receiveAndDelete" });
    const got = await receiveN(r, 2);
    assert.deepEqual(got.map((m) => m.body), [1, 2]);
    const more = await r.receiveMessages(1, { maxWaitTimeInMs: 500 });
    assert.equal(more.length, 0);
    const st = await statsWhen((s) => s["q-rad"].delivered === 2);
    assert.equal(st["q-rad"].active, 0);
    assert.equal(st["q-rad"].locked, 0);
  } finally {
    await sb.close();
  }
});
