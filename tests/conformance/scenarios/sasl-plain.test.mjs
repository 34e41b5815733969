import { test } from "node:test";
import assert from "node:assert/strict";
import rhea from "rhea";
import { keyName, key, port } from "../lib.mjs";

// rhea (the SDK's AMQP layer) used directly: SASL PLAIN with the rule name
// and key authorizes the connection without $cbs; a wrong key fails SASL.
function connect(password) {
  const c = rhea.create_container();
  return new Promise((resolve) => {
    const conn = c.connect({ host: "127.0.0.1", port: Number(port), username: keyName, password,
                             reconnect: false });
    conn.on("connection_open", () => resolve({ ok: true, conn }));
    conn.on("connection_error", (ctx) => resolve({ ok: false, error: ctx.connection.error }));
    conn.on("disconnected", (ctx) => resolve({ ok: false, error: ctx.error }));
  });
}

test("SASL PLAIN with the SAS rule and key authorizes links; a wrong key is refused", async () => {
  const good = await connect(key);
  assert.ok(good.ok, `PLAIN accepted: ${good.error}`);
  const sent = await new Promise((resolve, reject) => {
    const sender = good.conn.open_sender("q-auth");
    sender.on("sendable", () => { sender.send({ body: "plain", message_id: "pl-1" }); });
    sender.on("accepted", () => resolve(true));
    sender.on("rejected", (ctx) => reject(new Error(JSON.stringify(ctx.delivery.remote_state))));
    sender.on("sender_error", (ctx) => reject(ctx.sender.error));
  });
  assert.equal(sent, true);
  good.conn.close();
  const bad = await connect("wrong-key");
  assert.equal(bad.ok, false, "wrong key: SASL fails");
});
