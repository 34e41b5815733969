#!/usr/bin/env node
/*
 * alerts.test.js - the chart's PrometheusRule, rendered with the chart's
 * renderer (render/, Go text/template + sprig) and the release name
 * "inboxd" in namespace "apps", checked by Prometheus's own promtool:
 * `promtool check rules` on the rule group, then `promtool test rules` with
 * alerts.promtest.yaml, which fires each alert on a synthetic series and
 * keeps it quiet on a calm one. Needs promtool (Debian's prometheus
 * package, scripts/install-deps).
 *
 *   node alerts.test.js --work DIR
 */
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const here = __dirname;
const chartDir = path.join(here, '..', '..', 'helm', 'inboxd');
const argv = process.argv.slice(2);
const work = argv[argv.indexOf('--work') + 1] || path.join(require('node:os').tmpdir(), 'inboxd-alerts');
fs.mkdirSync(work, { recursive: true });

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error)
    throw new Error(`${cmd}: ${r.error.message}`);
  return r;
}

if (run('sh', ['-c', 'command -v promtool']).status !== 0) {
  console.error('tests/helm: promtool is missing (Debian package prometheus; scripts/install-deps)');
  process.exit(1);
}

const bin = path.join(work, 'render');
const env = { ...process.env, GO111MODULE: 'off', GOPATH: '/usr/share/gocode',
  GOCACHE: path.join(work, 'gocache'), GOFLAGS: '' };
let r = run('go', ['build', '-o', bin, '.'], { cwd: path.join(here, 'render'), env });
if (r.status !== 0) {
  console.error(`tests/helm: building the renderer failed:\n${r.stderr}`);
  process.exit(1);
}
const values = path.join(work, 'alerts-values.yaml');
fs.writeFileSync(values, 'prometheusRule:\n  enabled: true\n');
r = run(bin, ['-chart', chartDir, '-name', 'inboxd', '-namespace', 'apps', '-f', values]);
const out = JSON.parse(r.stdout);
if (!out.ok) {
  console.error(`tests/helm: rendering failed: ${out.error}`);
  process.exit(1);
}
const pr = out.manifests.flatMap((m) => m.objects).find((o) => o && o.kind === 'PrometheusRule');
if (!pr) {
  console.error('tests/helm: no PrometheusRule rendered');
  process.exit(1);
}
/*
 * A Prometheus rule file is the PrometheusRule's spec (JSON is YAML).
 * `promtool check rules` reads it whole, annotation templates included; the
 * unit tests read a copy without annotations, so that they pin what fires
 * (expression, `for`, labels) and not the wording.
 */
fs.writeFileSync(path.join(work, 'rules.json'), JSON.stringify(pr.spec, null, 2));
const bare = JSON.parse(JSON.stringify(pr.spec));
for (const g of bare.groups)
  for (const x of g.rules)
    delete x.annotations;
fs.writeFileSync(path.join(work, 'rules-bare.json'), JSON.stringify(bare, null, 2));
fs.copyFileSync(path.join(here, 'alerts.promtest.yaml'), path.join(work, 'alerts.promtest.yaml'));

/* Every alert of the chart must have a test case that fires it. */
const alerts = pr.spec.groups.flatMap((g) => g.rules.map((x) => x.alert)).filter(Boolean);
const tests = fs.readFileSync(path.join(here, 'alerts.promtest.yaml'), 'utf8');
const untested = alerts.filter((a) => !new RegExp(`alertname: ${a}\\n\\s+exp_alerts:\\n\\s+- exp_labels`).test(tests));
let status = 0;
if (untested.length) {
  console.error(`tests/helm: alerts without a firing case in alerts.promtest.yaml: ${untested.join(', ')}`);
  status = 1;
}
for (const args of [['check', 'rules', 'rules.json'], ['test', 'rules', 'alerts.promtest.yaml']]) {
  r = run('promtool', args, { cwd: work });
  process.stdout.write(`$ promtool ${args.join(' ')}\n${r.stdout}${r.stderr}`);
  if (r.status !== 0)
    status = 1;
}
console.log(`${alerts.length} alerts: ${alerts.join(', ')}`);
process.exit(status);
