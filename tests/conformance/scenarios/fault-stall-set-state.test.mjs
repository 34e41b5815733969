// sbemu-args: --fault-stall-set-state 1
import { test } from "node:test";
import assert from "node:assert/strict";
import { client } from "../lib.mjs";

test("--fault-stall-set-state: the first setSessionState gets no answer (ServiceTimeout) and changes nothing, the next is answered", async () => {
  const sb = client({ timeoutInMs: 1500 });
  try {
    await sb.createSender("q-sess-state").sendMessages({ body: "s", sessionId: "stall" });
    const r = await sb.acceptSession("q-sess-state", "stall", { maxAutoLockRenewalDurationInMs: 0 });
    await assert.rejects(r.setSessionState({ step: 1 }), (e) => e.code === "ServiceTimeout");
    assert.equal(await r.getSessionState(), null, "the unanswered set changed nothing");
    await r.setSessionState({ step: 2 });
    assert.deepEqual(await r.getSessionState(), { step: 2 });
    await r.close();
  } finally {
    await sb.close();
  }
});
