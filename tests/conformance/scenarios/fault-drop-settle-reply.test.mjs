// sbemu-args: --fault-drop-settle-reply 1
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("--fault-drop-settle-reply: the settlement applies but the client never hears back", async () => {
  const sb = client({ timeoutInMs: 2000 });
  try {
    await sb.createSender("q-basic").sendMessages({ body: "lost-ack" });
    const r = sb.createReceiver("q-basic");
    const [m] = await receiveN(r, 1);
    await assert.rejects(r.completeMessage(m), "no reply: the SDK times out");
    const st = await statsWhen((s) => s["q-basic"].completed === 1);
    assert.equal(st["q-basic"].completed, 1, "the broker applied the complete");
    assert.equal(st["q-basic"].active + st["q-basic"].locked, 0);
  } finally {
    await sb.close();
  }
});
