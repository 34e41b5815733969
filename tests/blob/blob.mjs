// blob.mjs - prepares and inspects blobs in Azurite for inboxd's claim-check
// tests and bench, as a real client would: the official Azure Storage Blob
// SDK (@azure/storage-blob) with Azurite's well-known development account.
//
//   node blob.mjs put ENDPOINT SPEC   SPEC: JSON array of
//       {"container": "docs", "name": "a.json", "doc": {...}, "pad": BYTES}
//     uploads each blob (doc as JSON, with a "pad" string of BYTES when
//     given) and prints one JSON object per line: name, url, sas_url (read
//     SAS, one hour), bad_sas_url (the same with a wrong signature), etag,
//     sha256, bytes.
//   node blob.mjs ls ENDPOINT CONTAINER   prints the blob names, one a line.
//   node blob.mjs stat ENDPOINT CONTAINER  one JSON line per blob: name,
//     bytes, sha256 (of its content, downloaded), content_type.
//   node blob.mjs mk ENDPOINT CONTAINER   creates the container.
//   node blob.mjs sas ENDPOINT CONTAINER PERMS   prints a container SAS
//     (query, one hour) with PERMS (e.g. "cw" to upload, "r" to read).
//
// ENDPOINT: http://127.0.0.1:PORT (Azurite's path-style account URL is
// ENDPOINT/devstoreaccount1).
import { createHash } from "node:crypto";
import {
  BlobSASPermissions,
  ContainerSASPermissions,
  BlobServiceClient,
  StorageSharedKeyCredential,
  generateBlobSASQueryParameters,
} from "@azure/storage-blob";

export const ACCOUNT = "devstoreaccount1";
export const KEY =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

function service(endpoint) {
  const cred = new StorageSharedKeyCredential(ACCOUNT, KEY);
  return { cred, svc: new BlobServiceClient(`${endpoint}/${ACCOUNT}`, cred) };
}

function body(spec) {
  const doc = { ...spec.doc };
  if (spec.pad) doc.pad = "x".repeat(spec.pad);
  return Buffer.from(JSON.stringify(doc));
}

async function put(endpoint, specs) {
  const { cred, svc } = service(endpoint);
  for (const s of specs) {
    const container = svc.getContainerClient(s.container);
    await container.createIfNotExists();
    const data = body(s);
    const blob = container.getBlockBlobClient(s.name);
    const up = await blob.upload(data, data.length, {
      blobHTTPHeaders: { blobContentType: "application/json" },
    });
    const sas = generateBlobSASQueryParameters(
      {
        containerName: s.container,
        blobName: s.name,
        permissions: BlobSASPermissions.parse("r"),
        expiresOn: new Date(Date.now() + 3600 * 1000),
      },
      cred,
    ).toString();
    const bad = sas.replace(/sig=([^&]*)/, "sig=" + encodeURIComponent(Buffer.alloc(32, 7).toString("base64")));
    console.log(
      JSON.stringify({
        name: s.name,
        url: blob.url,
        sas_url: `${blob.url}?${sas}`,
        bad_sas_url: `${blob.url}?${bad}`,
        etag: up.etag.replace(/"/g, ""),
        sha256: createHash("sha256").update(data).digest("hex"),
        bytes: data.length,
      }),
    );
  }
}

async function ls(endpoint, name) {
  const { svc } = service(endpoint);
  for await (const b of svc.getContainerClient(name).listBlobsFlat()) console.log(b.name);
}

async function stat(endpoint, name) {
  const { svc } = service(endpoint);
  const container = svc.getContainerClient(name);
  for await (const b of container.listBlobsFlat()) {
    const data = await container.getBlobClient(b.name).downloadToBuffer();
    console.log(
      JSON.stringify({
        name: b.name,
        bytes: data.length,
        sha256: createHash("sha256").update(data).digest("hex"),
        content_type: b.properties.contentType,
      }),
    );
  }
}

function sas(endpoint, name, perms) {
  const { cred } = service(endpoint);
  console.log(
    generateBlobSASQueryParameters(
      {
        containerName: name,
        permissions: ContainerSASPermissions.parse(perms),
        expiresOn: new Date(Date.now() + 3600 * 1000),
      },
      cred,
    ).toString(),
  );
}

const [cmd, endpoint, arg, arg2] = process.argv.slice(2);
if (cmd === "put") await put(endpoint, JSON.parse(arg));
else if (cmd === "ls") await ls(endpoint, arg);
else if (cmd === "stat") await stat(endpoint, arg);
else if (cmd === "mk") await service(endpoint).svc.getContainerClient(arg).create();
else if (cmd === "sas") sas(endpoint, arg, arg2);
else {
  console.error("usage: node blob.mjs put ENDPOINT SPEC | ls|stat|mk ENDPOINT CONTAINER | sas ENDPOINT CONTAINER PERMS");
  process.exit(2);
}
