// sbemu-args: --jwt-issuer https://issuer.sbemu.test/ --jwt-secret jwt-conformance-secret
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import rhea from "rhea";
import { port } from "../lib.mjs";

const b64url = (buf) => Buffer.from(buf).toString("base64url");
function jwt(claims, secret = "jwt-conformance-secret") {
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify(claims));
  const sig = b64url(createHmac("sha256", secret).update(`${head}.${body}`).digest());
  return `${head}.${body}.${sig}`;
}

// A raw $cbs exchange as the SDK does it with a TokenCredential (type jwt).
async function putToken(conn, token, audience) {
  const id = `req-${Math.random()}`;
  return new Promise((resolve, reject) => {
    const replyTo = `cbs-${id}`;
    const receiver = conn.open_receiver({ source: { address: "$cbs" }, name: replyTo });
    receiver.on("message", (ctx) => {
      if (ctx.message.correlation_id === id) resolve(ctx.message.application_properties["status-code"]);
    });
    receiver.on("receiver_open", () => {
      const sender = conn.open_sender({ target: { address: "$cbs" } });
      sender.on("sendable", () => {
        if (sender.sent) return;
        sender.sent = true;
        sender.send({ message_id: id, reply_to: replyTo, body: token,
          application_properties: { operation: "put-token", type: "jwt", name: audience } });
      });
      sender.on("sender_error", (ctx) => reject(ctx.sender.error));
    });
  });
}

async function attach(conn, address) {
  return new Promise((resolve) => {
    const s = conn.open_sender(address);
    // A refused attach is answered and then detached at once: wait a moment.
    s.on("sender_open", () => setTimeout(() => resolve("open"), 300));
    s.on("sender_error", (ctx) => resolve(ctx.sender.error?.condition));
  });
}

test("put-token type jwt: a valid HS256 token from the issuer authorizes; others get 401", async () => {
  const c = rhea.create_container();
  const conn = await new Promise((resolve, reject) => {
    const x = c.connect({ host: "127.0.0.1", port: Number(port), reconnect: false });
    x.on("connection_open", () => resolve(x));
    x.on("connection_error", (ctx) => reject(ctx.connection.error));
  });
  try {
    const now = Math.floor(Date.now() / 1000);
    const aud = `sb://127.0.0.1:${port}/q-auth`;
    assert.equal(await attach(conn, "q-auth"), "amqp:unauthorized-access", "no token yet");
    assert.equal(await putToken(conn, jwt({ iss: "https://other/", aud: "https://servicebus.azure.net", exp: now + 600 }), aud), 401);
    assert.equal(await putToken(conn, jwt({ iss: "https://issuer.sbemu.test/", aud: "https://servicebus.azure.net", exp: now - 1 }), aud), 401);
    assert.equal(await putToken(conn, jwt({ iss: "https://issuer.sbemu.test/", aud: "https://servicebus.azure.net", exp: now + 600 }, "bad"), aud), 401);
    assert.equal(await attach(conn, "q-auth"), "amqp:unauthorized-access", "still refused");
    assert.equal(await putToken(conn, jwt({ iss: "https://issuer.sbemu.test/", aud: "https://servicebus.azure.net", exp: now + 600 }), aud), 200);
    assert.equal(await attach(conn, "q-auth"), "open", "authorized for the audience");
    assert.equal(await attach(conn, "q-basic"), "amqp:unauthorized-access", "not for another entity");
  } finally {
    conn.close();
  }
});
