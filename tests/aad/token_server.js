#!/usr/bin/env node
/*
 * token_server.js - a stand-in for the Azure AD token endpoint on
 * 127.0.0.1, for tests/aad. Prints its port on the first line of stdout.
 *
 * POST /{tenant}/oauth2/v2.0/token behaves by client_id:
 *   good    200, expires_in 3600, access_token "at-<n>"
 *   short   200, expires_in 3 (so the client refreshes within seconds)
 *   denied  401 invalid_client with AADSTS700213, as Azure AD answers an
 *           unknown federated credential
 *   flaky   503 on the first request, then like good
 *   slow    answers after 3 s
 *   jwt     200 with an HS256 JWT (iss, aud https://servicebus.azure.net,
 *           exp in an hour, or in S seconds with "--jwt-lifetime S") signed
 *           with the secret of "--jwt ISSUER SECRET", which sbemu
 *           --jwt-issuer/--jwt-secret accepts
 * GET /requests returns every token request seen: path, headers, form.
 * With "--tls CERT KEY" it serves HTTPS with that certificate.
 * Exits when stdin closes, so it never outlives the test.
 */
'use strict';
const http = require('node:http');
const https = require('node:https');
const fs = require('node:fs');

const seen = [];
let issued = 0;

function send(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

const tls = process.argv.indexOf('--tls');
const jwtArg = process.argv.indexOf('--jwt');
const lifeArg = process.argv.indexOf('--jwt-lifetime');
const jwtLifetime = lifeArg < 0 ? 3600 : Number(process.argv[lifeArg + 1]);
const crypto = require('node:crypto');

function b64url(buf) {
  return Buffer.from(buf).toString('base64').replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_');
}

function mintJwt(issuer, secret) {
  const now = Math.floor(Date.now() / 1000);
  const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64url(JSON.stringify({ iss: issuer, aud: 'https://servicebus.azure.net', iat: now, exp: now + jwtLifetime }));
  const sig = b64url(crypto.createHmac('sha256', secret).update(`${head}.${body}`).digest());
  return `${head}.${body}.${sig}`;
}
const handler = (req, res) => {
  let raw = '';
  req.on('data', (d) => { raw += d; });
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/requests') return send(res, 200, seen);
    const m = /^\/([^/]+)\/oauth2\/v2\.0\/token$/.exec(req.url);
    if (req.method !== 'POST' || !m) return send(res, 404, { error: 'not_found' });
    const form = Object.fromEntries(new URLSearchParams(raw));
    seen.push({ path: req.url, contentType: req.headers['content-type'], form });
    const client = form.client_id;
    const ok = (expiresIn) => send(res, 200, {
      token_type: 'Bearer', expires_in: expiresIn, ext_expires_in: expiresIn, access_token: `at-${++issued}`,
    });
    const tries = seen.filter((r) => r.form.client_id === client).length;
    switch (client) {
      case 'good': return ok(3600);
      case 'short': return ok(3);
      case 'flaky': return tries === 1 ? send(res, 503, { error: 'temporarily_unavailable', error_codes: [50196] }) : ok(3600);
      case 'slow': return setTimeout(() => ok(3600), 3000);
      case 'jwt':
        if (jwtArg < 0) return send(res, 400, { error: 'unauthorized_client', error_codes: [700016] });
        return send(res, 200, {
          token_type: 'Bearer', expires_in: jwtLifetime, ext_expires_in: jwtLifetime,
          access_token: mintJwt(process.argv[jwtArg + 1], process.argv[jwtArg + 2]),
        });
      case 'denied':
        return send(res, 401, {
          error: 'invalid_client',
          error_description: "AADSTS700213: No matching federated identity record found for presented assertion subject 'system:serviceaccount:apps:inboxd'. Trace ID: 0000",
          error_codes: [700213],
          trace_id: '0000',
        });
      default: return send(res, 400, { error: 'unauthorized_client', error_codes: [700016] });
    }
  });
};
const server = tls > 0
  ? https.createServer({ cert: fs.readFileSync(process.argv[tls + 1]), key: fs.readFileSync(process.argv[tls + 2]) }, handler)
  : http.createServer(handler);

server.listen(0, '127.0.0.1', () => process.stdout.write(`${server.address().port}\n`));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
