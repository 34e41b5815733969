import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("acceptSession for a named session gets only that session's messages", async () => {
  const sb = client();
  try {
    await sb.createSender("q-sess").sendMessages([
      { body: "a1", sessionId: "A" }, { body: "b1", sessionId: "B" }, { body: "a2", sessionId: "A" },
    ]);
    const r = await sb.acceptSession("q-sess", "B");
    assert.equal(r.sessionId, "B");
    assert.ok(r.sessionLockedUntilUtc.getTime() > Date.now(), "session lock in the future");
    const got = await receiveN(r, 1);
    assert.deepEqual(got.map((m) => [m.body, m.sessionId]), [["b1", "B"]]);
    await r.completeMessage(got[0]);
    await assert.rejects(sb.acceptSession("q-sess", "B"), (e) => e.code === "SessionCannotBeLocked",
      "one receiver per session");
    await r.close();
    const a = await sb.acceptSession("q-sess", "A");
    const ga = await receiveN(a, 2);
    assert.deepEqual(ga.map((m) => m.body), ["a1", "a2"]);
    for (const m of ga) await a.completeMessage(m);
  } finally {
    await sb.close();
  }
});
