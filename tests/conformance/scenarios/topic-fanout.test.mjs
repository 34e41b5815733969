import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("a topic fans out to both subscriptions", async () => {
  const sb = client();
  try {
    await sb.createSender("events").sendMessages([{ body: "e1", messageId: "e1" }, { body: "e2", messageId: "e2" }]);
    for (const sub of ["billing", "audit"]) {
      const r = sb.createReceiver("events", sub);
      const got = await receiveN(r, 2);
      assert.deepEqual(got.map((m) => m.body), ["e1", "e2"], sub);
      assert.deepEqual(got.map((m) => Number(m.sequenceNumber)), [1, 2], `${sub} numbers its own messages`);
      for (const m of got) await r.completeMessage(m);
      const more = await r.receiveMessages(1, { maxWaitTimeInMs: 300 });
      assert.equal(more.length, 0);
    }
  } finally {
    await sb.close();
  }
});
