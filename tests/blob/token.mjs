// token.mjs - a stand-in for the Azure AD token endpoint, for the claim
// check's workload identity against Azurite's OAuth mode: POST
// /{tenant}/oauth2/v2.0/token answers a JWT that Azurite's "basic" check
// takes (aud https://storage.azure.com, iss https://sts.windows.net/{tenant}/,
// iat / nbf / exp; Azurite checks no signature, so it carries none that
// matters). Every request's form is appended to FILE as a JSON line.
// Prints {"port": N} when listening.
//
//   node token.mjs FILE
import { appendFileSync } from "node:fs";
import http from "node:http";

const log = process.argv[2];
const b64url = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");

const server = http.createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    const form = Object.fromEntries(new URLSearchParams(body));
    const tenant = req.url.split("/")[1];
    appendFileSync(log, JSON.stringify({ path: req.url, form }) + "\n");
    const now = Math.floor(Date.now() / 1000);
    const jwt = [
      b64url({ alg: "HS256", typ: "JWT" }),
      b64url({ aud: "https://storage.azure.com", iss: `https://sts.windows.net/${tenant}/`,
               iat: now - 60, nbf: now - 60, exp: now + 3600, oid: form.client_id }),
      b64url({ not: "a signature" }),
    ].join(".");
    const out = JSON.stringify({ token_type: "Bearer", expires_in: 3600, access_token: jwt });
    res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(out) });
    res.end(out);
  });
});
server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: server.address().port })));
