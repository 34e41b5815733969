import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("acceptNextSession picks a free session, and times out when none is free", async () => {
  const sb = client({ timeoutInMs: 2000 });
  try {
    await sb.createSender("q-sess-next").sendMessages([{ body: "x", sessionId: "S1" }, { body: "y", sessionId: "S2" }]);
    const r1 = await sb.acceptNextSession("q-sess-next");
    const r2 = await sb.acceptNextSession("q-sess-next");
    assert.deepEqual([r1.sessionId, r2.sessionId].sort(), ["S1", "S2"]);
    const [m1] = await receiveN(r1, 1);
    assert.equal(m1.sessionId, r1.sessionId);
    await r1.completeMessage(m1);
    const started = Date.now();
    await assert.rejects(sb.acceptNextSession("q-sess-next"), (e) => e.code === "ServiceTimeout",
      "no free session: com.microsoft:timeout");
    assert.ok(Date.now() - started >= 1500, "the broker waited for the requested timeout");
  } finally {
    await sb.close();
  }
});
