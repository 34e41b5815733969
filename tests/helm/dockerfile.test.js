#!/usr/bin/env node
/*
 * dockerfile.test.js - a static check of the root Dockerfile, since no
 * container engine runs here: Debian 12 stages, a build stage that runs the
 * README's own build commands, a runtime stage with the binaries, ODBC
 * drivers and the documented Microsoft driver switch, a numeric non-root
 * USER, ENTRYPOINT ["inboxd"], and a .dockerignore that keeps local builds
 * and node_modules out of the context while keeping what the build copies.
 * No dependencies beyond node.
 */
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const repo = path.resolve(__dirname, '..', '..');
const dockerfile = fs.readFileSync(path.join(repo, 'Dockerfile'), 'utf8');
const readme = fs.readFileSync(path.join(repo, 'README.md'), 'utf8');

/* Instructions with continuation lines joined and comments dropped. */
function parse(text) {
  const out = [];
  let cur = '';
  for (const raw of text.split('\n')) {
    if (/^\s*#/.test(raw) && !cur) continue;
    if (/^\s*#/.test(raw)) continue; /* a comment inside a continued instruction */
    const line = raw.replace(/\s+$/, '');
    if (line.endsWith('\\')) {
      cur += line.slice(0, -1) + ' ';
      continue;
    }
    cur += line;
    if (cur.trim()) {
      const m = /^\s*(\w+)\s+(.*)$/s.exec(cur);
      assert.ok(m, `cannot parse instruction: ${cur}`);
      out.push({ op: m[1].toUpperCase(), args: m[2].replace(/\s+/g, ' ').trim() });
    }
    cur = '';
  }
  return out;
}

function stages(instrs) {
  const list = [];
  for (const i of instrs) {
    if (i.op === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(i.args);
      list.push({ image: m[1], name: m[2], instrs: [] });
    } else if (list.length) {
      list[list.length - 1].instrs.push(i);
    }
  }
  return list;
}

/* Commands of the README's "Building by hand" block, one per line. */
function readmeBuildCommands() {
  const sec = readme.split(/^## /m).find((s) => s.startsWith('Building by hand'));
  assert.ok(sec, 'README.md has no "Building by hand" section');
  const block = /```sh\n([\s\S]*?)```/.exec(sec)[1];
  return block.split('\n').map((l) => l.replace(/\s+#.*$/, '').trim()).filter(Boolean);
}

let passed = 0;
let failed = 0;
function test(name, fn) {
  try {
    fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n     ${String(e.message).split('\n').join('\n     ')}`);
  }
}

const instrs = parse(dockerfile);
const st = stages(instrs);
const build = st.find((s) => s.name === 'build');
const runtime = st[st.length - 1];
const runs = (s) => s.instrs.filter((i) => i.op === 'RUN').map((i) => i.args);

test('multi-stage on Debian 12', () => {
  assert.ok(st.length >= 2, 'at least a build and a runtime stage');
  for (const s of st) assert.match(s.image, /^debian:(12|bookworm)(-slim)?(@sha256:[0-9a-f]{64})?$/, `stage image ${s.image}`);
  assert.ok(build, 'a stage named "build"');
  assert.notEqual(runtime, build, 'the last stage is not the build stage');
});

test('build stage runs the commands the README documents, build needs only', () => {
  const cmds = readmeBuildCommands();
  const deps = cmds.find((c) => c.includes('scripts/install-deps'));
  const make = cmds.find((c) => c.startsWith('cmake -S . -B build '));
  assert.ok(deps && make, `README build block lacks install-deps or the cmake build: ${cmds.join(' | ')}`);
  const r = runs(build);
  const d = r.findIndex((x) => x === `${deps} --build-only`);
  const m = r.findIndex((x) => x.startsWith(make));
  assert.ok(d >= 0, `no RUN ${deps} --build-only (have: ${r.join(' | ')})`);
  assert.ok(m >= 0, `no RUN ${make}... (have: ${r.join(' | ')})`);
  assert.ok(d < m, 'dependencies before the build');
  /* --build-only installs no database server, Go or Node. */
  const script = fs.readFileSync(path.join(repo, 'scripts', 'install-deps'), 'utf8');
  const list = /build_packages=\(([^)]*)\)/.exec(script);
  assert.ok(list, 'scripts/install-deps has a build_packages list');
  for (const p of ['postgresql', 'golang', 'nodejs', 'npm', 'sqlite3', 'jq'])
    assert.ok(!new RegExp(`\\b${p}\\b`).test(list[1]), `build_packages must not hold ${p}`);
});

test('runtime stage holds the binaries, ODBC drivers and no toolchain', () => {
  const copies = runtime.instrs.filter((i) => i.op === 'COPY').map((i) => i.args);
  const fromBuild = copies.filter((c) => c.startsWith('--from=build '));
  assert.ok(fromBuild.some((c) => c.includes('/build/inboxd ')), 'COPY --from=build build/inboxd');
  assert.ok(fromBuild.some((c) => c.includes('/build/inboxctl ')), 'COPY --from=build build/inboxctl');
  assert.equal(copies.length, fromBuild.length, 'the runtime copies nothing from the context');
  const install = runs(runtime).join(' ');
  for (const p of ['odbc-postgresql', 'libsqliteodbc', 'tdsodbc', 'unixodbc', 'libqpid-proton11', 'libjansson4', 'ca-certificates'])
    assert.ok(new RegExp(`\\b${p}\\b`).test(install), `runtime installs ${p}`);
  for (const p of ['build-essential', 'cmake', 'gcc', '-dev\\b', 'golang'])
    assert.ok(!new RegExp(p).test(install), `runtime must not install ${p}`);
  assert.match(install, /--no-install-recommends/);
  assert.match(install, /rm -rf \/var\/lib\/apt\/lists/);
});

test('Microsoft ODBC Driver 18 is a documented, off-by-default build argument', () => {
  const arg = runtime.instrs.find((i) => i.op === 'ARG' && /^MSODBCSQL18=/.test(i.args));
  assert.ok(arg, 'ARG MSODBCSQL18 in the runtime stage');
  assert.equal(arg.args, 'MSODBCSQL18=0');
  assert.match(dockerfile, /^#.*--build-arg MSODBCSQL18=1/m, 'a comment shows how to enable it');
  const install = runs(runtime).join(' ');
  assert.match(install, /if \[ "\$MSODBCSQL18" = 1 \]; then .*ACCEPT_EULA=Y .*msodbcsql18.* fi;/);
});

test('runs as a numeric non-root user with ENTRYPOINT ["inboxd"]', () => {
  const users = runtime.instrs.filter((i) => i.op === 'USER');
  assert.equal(users.length, 1, 'one USER in the runtime stage');
  const m = /^(\d+)(?::(\d+))?$/.exec(users[0].args);
  assert.ok(m, `USER must be numeric, got ${users[0].args}`);
  assert.ok(Number(m[1]) > 0 && (m[2] === undefined || Number(m[2]) > 0), 'not root');
  assert.match(runs(runtime).join(' '), new RegExp(`useradd .*--uid ${m[1]}\\b`), 'the user exists in /etc/passwd');
  const last = runtime.instrs.filter((i) => i.op === 'USER' || i.op === 'RUN').pop();
  assert.equal(last.op, 'USER', 'nothing runs as root after USER');
  const eps = runtime.instrs.filter((i) => i.op === 'ENTRYPOINT');
  assert.equal(eps.length, 1);
  assert.deepEqual(JSON.parse(eps[0].args), ['inboxd'], 'exec-form ENTRYPOINT ["inboxd"]');
  /* The chart's probes and Service use the default http.listen port. */
  assert.ok(runtime.instrs.some((i) => i.op === 'EXPOSE' && i.args === '9090'), 'EXPOSE 9090');
});

test('no remote ADD, no floating tags', () => {
  assert.ok(!instrs.some((i) => i.op === 'ADD'), 'use COPY, not ADD');
  assert.ok(!st.some((s) => /:latest$/.test(s.image)));
});

test('.dockerignore keeps builds and node_modules out and the build inputs in', () => {
  const ignore = fs.readFileSync(path.join(repo, '.dockerignore'), 'utf8')
    .split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  for (const p of ['.git', 'build', 'build-*', '**/node_modules'])
    assert.ok(ignore.includes(p), `.dockerignore lacks ${p}`);
  /* What the build stage copies by name must exist and not be ignored. */
  for (const c of build.instrs.filter((i) => i.op === 'COPY').map((i) => i.args.split(' ')[0])) {
    if (c === '.') continue;
    assert.ok(fs.existsSync(path.join(repo, c)), `${c} does not exist`);
    assert.ok(!ignore.some((p) => c === p || c.startsWith(p + '/')), `${c} is ignored`);
  }
  for (const f of ['CMakeLists.txt', 'common', 'amqp', 'db', 'worker', 'scripts'])
    assert.ok(!ignore.includes(f), `${f} must reach the build`);
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
