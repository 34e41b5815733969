// sbemu-args: --fault-settle-delay-ms 1500
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("--fault-settle-delay-ms: complete resolves only after the delayed reply", async () => {
  const sb = client();
  try {
    await sb.createSender("q-basic").sendMessages({ body: "slow-ack" });
    const r = sb.createReceiver("q-basic");
    const [m] = await receiveN(r, 1);
    const t = Date.now();
    await r.completeMessage(m);
    assert.ok(Date.now() - t >= 1400, `completed after ${Date.now() - t} ms`);
  } finally {
    await sb.close();
  }
});
