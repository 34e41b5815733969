import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("duplicate detection drops a re-sent messageId inside the window", async () => {
  const sb = client();
  try {
    const s = sb.createSender("q-dup");
    await s.sendMessages({ body: "first", messageId: "dup-1" });
    await s.sendMessages({ body: "second", messageId: "dup-1" }); // accepted, dropped
    await s.sendMessages([{ body: "third", messageId: "dup-1" }, { body: "other", messageId: "dup-2" }]);
    const r = sb.createReceiver("q-dup", { receiveMode: "receiveAndDelete" });
    const got = await receiveN(r, 3, 2000);
    assert.deepEqual(got.map((m) => m.body), ["first", "other"]);
    const st = await statsWhen((x) => x["q-dup"].duplicate_detected === 2);
    assert.equal(st["q-dup"].duplicate_detected, 2);
  } finally {
    await sb.close();
  }
});
