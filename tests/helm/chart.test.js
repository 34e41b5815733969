#!/usr/bin/env node
/*
 * chart.test.js - renders helm/inboxd with Go's text/template + sprig (the
 * renderer in render/), for the default values and every ci/*.yaml, then:
 *   - validates every object against the Kubernetes, KEDA and
 *     prometheus-operator schemas (npm kubernetes-models, offline);
 *   - asserts the facts an operator relies on: probes, security context,
 *     secret references, grace period, labels and selectors, workload
 *     identity wiring, KEDA trigger metadata, ServiceMonitor, PDB;
 *   - checks the ConfigMap's inboxd.json holds only keys that
 *     `inboxd --print-config` knows, and that `inboxd --check-config` accepts it;
 *   - renders every file under bad/ and expects the error named on its
 *     first line ("# expect-error: TEXT").
 *
 * Usage: node chart.test.js --inboxd PATH --work DIR
 * Exit status 0 when every check passes, 1 otherwise.
 */
'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const here = __dirname;
const repo = path.resolve(here, '..', '..');
const chartDir = path.join(repo, 'helm', 'inboxd');

function arg(name) {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
}
const inboxd = arg('--inboxd');
const work = arg('--work') || fs.mkdtempSync('/tmp/inboxd-helm-');

if (!fs.existsSync(path.join(here, 'node_modules', 'kubernetes-models'))) {
  console.error(`tests/helm: node_modules is missing; run "npm ci" in ${here} (scripts/test does this)`);
  process.exit(1);
}
if (!inboxd || !fs.existsSync(inboxd)) {
  console.error(`tests/helm: --inboxd must name the built inboxd binary (got ${inboxd})`);
  process.exit(1);
}

const models = {
  'v1/ConfigMap': require('kubernetes-models/v1').ConfigMap,
  'v1/Service': require('kubernetes-models/v1').Service,
  'v1/ServiceAccount': require('kubernetes-models/v1').ServiceAccount,
  'apps/v1/Deployment': require('kubernetes-models/apps/v1').Deployment,
  'policy/v1/PodDisruptionBudget': require('kubernetes-models/policy/v1').PodDisruptionBudget,
  'keda.sh/v1alpha1/ScaledObject': require('@kubernetes-models/keda/keda.sh/v1alpha1').ScaledObject,
  'keda.sh/v1alpha1/TriggerAuthentication':
    require('@kubernetes-models/keda/keda.sh/v1alpha1').TriggerAuthentication,
  'monitoring.coreos.com/v1/ServiceMonitor':
    require('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1').ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule':
    require('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1').PrometheusRule,
};

/* ---- the renderer ---- */

function buildRenderer() {
  const bin = path.join(work, 'render');
  const env = {
    ...process.env,
    GO111MODULE: 'off',
    GOPATH: '/usr/share/gocode',
    GOCACHE: path.join(work, 'gocache'),
    GOFLAGS: '',
  };
  const r = spawnSync('go', ['build', '-o', bin, '.'], { cwd: path.join(here, 'render'), env, encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    console.error('tests/helm: building the renderer failed (needs golang-go, golang-github-masterminds-sprig-dev, ' +
      'golang-gopkg-yaml.v3-dev; see scripts/install-deps)');
    console.error(r.error ? String(r.error) : r.stderr);
    process.exit(1);
  }
  return bin;
}

function render(bin, valueFiles) {
  const args = ['-chart', chartDir, '-name', 'inboxd', '-namespace', 'apps'];
  for (const f of valueFiles) args.push('-f', f);
  const r = spawnSync(bin, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0)
    throw new Error(`renderer failed: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

/* ---- inboxd's own view of the config ---- */

const dummyEnv = {
  INBOXD_SERVICEBUS_CONNECTION_STRING:
    'Endpoint=sb://ns.example.test/;SharedAccessKeyName=test;SharedAccessKey=dGVzdA==',
  INBOXD_DB_CONNECTION_STRING: 'Driver={SQLite3};Database=/tmp/never-opened.db',
};

/* inboxd's built-in defaults, as `inboxd --print-config` prints them with no file. */
function printedDefaults() {
  const env = { ...process.env, ...dummyEnv };
  for (const k of Object.keys(env)) if (k.startsWith('INBOXD_') && !(k in dummyEnv)) delete env[k];
  const r = spawnSync(inboxd, ['--print-config'], { encoding: 'utf8', env });
  return JSON.parse(r.stdout);
}

/* Leaf keys of `inboxd --print-config` as a tree: {section: {key: true}}. */
function knownKeys() {
  const printed = printedDefaults();
  const tree = (o) => {
    const t = {};
    for (const [k, v] of Object.entries(o))
      t[k] = v && typeof v === 'object' && !Array.isArray(v) ? tree(v) : true;
    return t;
  };
  return tree(printed);
}

function unknownKeys(cfg, known, prefix = '') {
  const bad = [];
  for (const [k, v] of Object.entries(cfg)) {
    const name = prefix + k;
    if (!(k in known)) bad.push(name);
    else if (known[k] !== true) {
      if (v && typeof v === 'object' && !Array.isArray(v)) bad.push(...unknownKeys(v, known[k], name + '.'));
      else bad.push(`${name} (a section, given a value)`);
    }
  }
  return bad;
}

function checkConfig(json, label) {
  const file = path.join(work, `${label}.inboxd.json`);
  fs.writeFileSync(file, json);
  /*
   * With workload identity the Service Bus string is the keyless one the
   * chart passes; otherwise a dummy SAS string stands in for the Secret.
   * Without an entity in the config, the string must carry EntityPath.
   */
  const env = { ...process.env, ...dummyEnv };
  for (const k of Object.keys(env)) if (k.startsWith('INBOXD_') && !(k in dummyEnv)) delete env[k];
  if ((JSON.parse(json).servicebus || {}).auth === 'workload_identity')
    env.INBOXD_SERVICEBUS_CONNECTION_STRING = 'Endpoint=sb://ns.example.test/';
  if (!(JSON.parse(json).servicebus || {}).entity) env.INBOXD_SERVICEBUS_CONNECTION_STRING += ';EntityPath=q';
  /* Passwordless Azure SQL: a credential-free string for Microsoft's driver. */
  if ((JSON.parse(json).db || {}).auth === 'workload_identity')
    env.INBOXD_DB_CONNECTION_STRING = 'Driver={ODBC Driver 18 for SQL Server};Server=tcp:db.example.test,1433;Database=d';
  const r = spawnSync(inboxd, ['--check-config', '--config', file], { encoding: 'utf8', env });
  return { status: r.status, out: (r.stdout || '') + (r.stderr || '') };
}

/* ---- assertions ---- */

const get = (o, p) => p.split('.').reduce((x, k) => (x == null ? undefined : x[k]), o);

function byKind(objects, kind) {
  return objects.filter((o) => o.kind === kind);
}

function one(objects, kind) {
  const l = byKind(objects, kind);
  assert.equal(l.length, 1, `exactly one ${kind}`);
  return l[0];
}

function subset(labels, selector, what) {
  for (const [k, v] of Object.entries(selector))
    assert.equal(labels[k], v, `${what}: label ${k}`);
}

function checkCase(label, res, known) {
  assert.equal(res.ok, true, `render failed: ${res.error}`);
  const V = res.values;
  const objects = res.manifests.flatMap((m) => m.objects);
  const text = res.manifests.map((m) => m.text).join('\n---\n');

  /* Schemas. */
  for (const o of objects) {
    const key = `${o.apiVersion}/${o.kind}`;
    const Model = models[key];
    assert.ok(Model, `no schema for ${key}`);
    try {
      new Model(o).validate();
    } catch (e) {
      throw new Error(`${key} ${get(o, 'metadata.name')}: ${e.message}`);
    }
    assert.equal(get(o, 'metadata.namespace'), 'apps', `${key} namespace`);
    const l = get(o, 'metadata.labels') || {};
    for (const k of ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by', 'helm.sh/chart'])
      assert.ok(l[k], `${key} label ${k}`);
  }

  /* Nothing secret, nothing unrendered. */
  for (const needle of ['SharedAccessKey=', 'Pwd=', 'Password=', '<no value>'])
    assert.ok(!text.includes(needle), `rendered output contains ${needle}`);

  /* ConfigMap. */
  const cm = one(objects.filter((o) => !get(o, 'metadata.name').endsWith('-dashboard')), 'ConfigMap');
  const json = cm.data['inboxd.json'];
  const cfg = JSON.parse(json);
  assert.deepEqual(unknownKeys(cfg, known), [], 'ConfigMap keys unknown to inboxd');
  assert.ok(!('connection_string' in (cfg.servicebus || {})), 'servicebus.connection_string in ConfigMap');
  assert.ok(!('connection_string' in (cfg.db || {})), 'db.connection_string in ConfigMap');
  const check = checkConfig(json, label);
  assert.equal(check.status, 0, `inboxd --check-config rejects the ConfigMap:\n${check.out}`);
  assert.equal(cfg.consumer, V.config.consumer || 'inboxd', 'consumer');
  if (V.workloadIdentity.enabled)
    assert.equal(cfg.servicebus.auth, 'workload_identity', 'auth forced by workloadIdentity.enabled');

  /* Deployment. */
  const dep = one(objects, 'Deployment');
  const pod = dep.spec.template.spec;
  assert.equal(pod.containers.length, 1);
  const c = pod.containers[0];
  subset(dep.spec.template.metadata.labels, dep.spec.selector.matchLabels, 'pod template vs selector');
  if (V.keda.enabled) assert.equal(dep.spec.replicas, undefined, 'replicas left to KEDA');
  else assert.equal(dep.spec.replicas, V.replicaCount, 'replicas');

  const drain = V.config.shutdown.drain_timeout_s;
  assert.equal(pod.terminationGracePeriodSeconds, drain + V.terminationGraceMarginSeconds, 'grace period');
  assert.ok(pod.terminationGracePeriodSeconds > drain, 'grace period longer than the drain');

  assert.equal(pod.securityContext.runAsNonRoot, true);
  assert.ok(Number.isInteger(pod.securityContext.runAsUser) && pod.securityContext.runAsUser > 0, 'numeric non-root user');
  assert.equal(get(pod, 'securityContext.seccompProfile.type'), 'RuntimeDefault');
  assert.equal(c.securityContext.readOnlyRootFilesystem, true);
  assert.equal(c.securityContext.allowPrivilegeEscalation, false);
  assert.ok(c.securityContext.capabilities.drop.includes('ALL'), 'drop ALL');
  assert.equal(pod.automountServiceAccountToken, false);

  const port = Number(V.config.http.listen.split(':').pop());
  const http = c.ports.find((p) => p.name === 'http');
  assert.equal(http.containerPort, port, 'container port from config.http.listen');
  assert.equal(get(c, 'livenessProbe.httpGet.path'), '/healthz');
  assert.equal(get(c, 'livenessProbe.httpGet.port'), 'http');
  assert.equal(get(c, 'readinessProbe.httpGet.path'), '/readyz');
  assert.equal(get(c, 'readinessProbe.httpGet.port'), 'http');
  if (V.probes.startup.enabled) assert.equal(get(c, 'startupProbe.httpGet.path'), '/healthz');
  else assert.equal(c.startupProbe, undefined);

  assert.deepEqual(c.args, ['--config', '/etc/inboxd/inboxd.json']);
  const mount = c.volumeMounts.find((m) => m.mountPath === '/etc/inboxd');
  const vol = pod.volumes.find((v) => v.name === mount.name);
  assert.equal(vol.configMap.name, cm.metadata.name, 'config volume is the ConfigMap');
  assert.ok(c.volumeMounts.some((m) => m.mountPath === '/tmp'), 'writable /tmp');
  const sum = crypto.createHash('sha256').update(json.replace(/\n$/, '')).digest('hex');
  assert.equal(dep.spec.template.metadata.annotations['checksum/config'], sum, 'config checksum annotation');

  const env = Object.fromEntries(c.env.map((e) => [e.name, e]));
  const fullname = dep.metadata.name;
  if (V.database.connectionString) {
    /* Passwordless Azure SQL: the string from values, no Secret. */
    assert.equal(env.INBOXD_DB_CONNECTION_STRING.value, V.database.connectionString);
    assert.equal(env.INBOXD_DB_CONNECTION_STRING.valueFrom, undefined);
  } else {
    const dbRef = get(env.INBOXD_DB_CONNECTION_STRING, 'valueFrom.secretKeyRef');
    assert.deepEqual(dbRef, { name: V.secrets.db.existingSecret || fullname, key: V.secrets.db.key }, 'db secret ref');
  }
  if ((cfg.db || {}).auth === 'workload_identity')
    assert.ok(V.workloadIdentity.enabled, 'db.auth workload_identity only with workload identity');
  const sb = env.INBOXD_SERVICEBUS_CONNECTION_STRING;
  if (V.workloadIdentity.enabled && !V.secrets.serviceBus.existingSecret) {
    assert.equal(sb.value, `Endpoint=sb://${V.serviceBus.namespace}.${V.serviceBus.endpointSuffix}/`);
    assert.equal(sb.valueFrom, undefined);
  } else {
    assert.deepEqual(get(sb, 'valueFrom.secretKeyRef'),
      { name: V.secrets.serviceBus.existingSecret || fullname, key: V.secrets.serviceBus.key }, 'servicebus secret ref');
  }
  for (const e of c.env)
    if (e.value) assert.ok(!/SharedAccessKey|Pwd|Password|Secret/i.test(e.value), `env ${e.name} holds a secret`);

  /* ServiceAccount and workload identity. */
  const sas = byKind(objects, 'ServiceAccount');
  if (V.serviceAccount.create) {
    assert.equal(sas.length, 1);
    assert.equal(pod.serviceAccountName, sas[0].metadata.name);
  } else {
    assert.equal(sas.length, 0);
    assert.equal(pod.serviceAccountName, V.serviceAccount.name);
  }
  const wiLabel = dep.spec.template.metadata.labels['azure.workload.identity/use'];
  if (V.workloadIdentity.enabled) {
    assert.equal(wiLabel, 'true', 'workload identity pod label');
    if (sas.length) {
      assert.equal(sas[0].metadata.annotations['azure.workload.identity/client-id'], V.workloadIdentity.clientId);
      if (V.workloadIdentity.tenantId)
        assert.equal(sas[0].metadata.annotations['azure.workload.identity/tenant-id'], V.workloadIdentity.tenantId);
    }
  } else {
    assert.equal(wiLabel, undefined, 'no workload identity label');
    if (sas.length)
      assert.deepEqual(Object.keys(sas[0].metadata.annotations || {}).filter((k) => k.startsWith('azure.workload')), []);
  }

  /* Service and ServiceMonitor. */
  const svcs = byKind(objects, 'Service');
  assert.equal(svcs.length, V.service.enabled ? 1 : 0);
  if (svcs.length) {
    subset(dep.spec.template.metadata.labels, svcs[0].spec.selector, 'Service selector');
    assert.equal(svcs[0].spec.ports[0].targetPort, 'http');
  }
  const sms = byKind(objects, 'ServiceMonitor');
  assert.equal(sms.length, V.serviceMonitor.enabled ? 1 : 0);
  if (sms.length) {
    subset(svcs[0].metadata.labels, sms[0].spec.selector.matchLabels, 'ServiceMonitor selector');
    assert.equal(sms[0].spec.endpoints[0].port, 'http');
    assert.equal(sms[0].spec.endpoints[0].path, '/metrics');
    subset(sms[0].metadata.labels, V.serviceMonitor.labels, 'ServiceMonitor labels');
    /* The dashboard's variables: consumer and entity on every series. */
    const rl = Object.fromEntries(sms[0].spec.endpoints[0].relabelings.map((r) => [r.targetLabel, r.replacement]));
    assert.deepEqual(rl, { consumer: V.config.consumer, entity: V.config.servicebus.entity }, 'ServiceMonitor relabelings');
  }
  checkDashboard(objects, V);

  /* PrometheusRule. */
  const prs = byKind(objects, 'PrometheusRule');
  assert.equal(prs.length, V.prometheusRule.enabled ? 1 : 0);
  if (prs.length) checkRules(prs[0], V, dep.metadata.name);

  /* PodDisruptionBudget. */
  const pdbs = byKind(objects, 'PodDisruptionBudget');
  assert.equal(pdbs.length, V.podDisruptionBudget.enabled ? 1 : 0);
  if (pdbs.length) {
    subset(dep.spec.template.metadata.labels, pdbs[0].spec.selector.matchLabels, 'PDB selector');
    if (V.podDisruptionBudget.minAvailable !== '') {
      assert.equal(pdbs[0].spec.minAvailable, V.podDisruptionBudget.minAvailable);
      assert.equal(pdbs[0].spec.maxUnavailable, undefined);
    } else {
      assert.equal(pdbs[0].spec.maxUnavailable, V.podDisruptionBudget.maxUnavailable);
    }
  }

  /* KEDA. */
  const sos = byKind(objects, 'ScaledObject');
  const tas = byKind(objects, 'TriggerAuthentication');
  assert.equal(sos.length, V.keda.enabled ? 1 : 0);
  assert.equal(tas.length, V.keda.enabled ? 1 : 0);
  if (sos.length) {
    const so = sos[0].spec;
    assert.equal(so.scaleTargetRef.name, dep.metadata.name);
    assert.equal(so.minReplicaCount, V.keda.minReplicaCount);
    assert.equal(so.maxReplicaCount, V.keda.maxReplicaCount);
    assert.equal(so.triggers.length, 1);
    const t = so.triggers[0];
    assert.equal(t.type, 'azure-servicebus');
    assert.equal(t.authenticationRef.name, tas[0].metadata.name);
    assert.equal(t.metadata.messageCount, String(V.keda.messageCount));
    assert.equal(t.metadata.activationMessageCount, String(V.keda.activationMessageCount));
    const entity = V.config.servicebus.entity.split('/');
    if (entity.length === 3) {
      assert.equal(t.metadata.topicName, entity[0]);
      assert.equal(t.metadata.subscriptionName, entity[2]);
      assert.equal(t.metadata.queueName, undefined);
    } else {
      assert.equal(t.metadata.queueName, entity[0]);
      assert.equal(t.metadata.topicName, undefined);
    }
    const ta = tas[0].spec;
    if (V.keda.auth === 'workloadIdentity') {
      assert.equal(ta.podIdentity.provider, 'azure-workload');
      assert.equal(t.metadata.namespace, V.serviceBus.namespace);
      if (V.keda.identityId) assert.equal(ta.podIdentity.identityId, V.keda.identityId);
      assert.equal(ta.secretTargetRef, undefined);
    } else {
      assert.deepEqual(ta.secretTargetRef, [{
        parameter: 'connection',
        name: V.keda.existingSecret || V.secrets.serviceBus.existingSecret || fullname,
        key: V.keda.key || V.secrets.serviceBus.key,
      }]);
      assert.equal(ta.podIdentity, undefined);
    }
  }
  return objects.length;
}

/* The Grafana dashboard's ConfigMap: the sidecar's label, the chart's JSON, the runbook URL. */
function checkDashboard(objects, V) {
  const cms = byKind(objects, 'ConfigMap').filter((c) => c.metadata.name.endsWith('-dashboard'));
  assert.equal(cms.length, V.dashboard.enabled ? 1 : 0, 'dashboard ConfigMaps');
  if (!cms.length) return;
  const cm = cms[0];
  assert.equal(cm.metadata.labels[V.dashboard.label], String(V.dashboard.labelValue), 'sidecar label');
  if (V.dashboard.namespace) assert.equal(cm.metadata.namespace, V.dashboard.namespace);
  if (V.dashboard.folder) assert.equal(cm.metadata.annotations.grafana_folder, V.dashboard.folder);
  const shipped = JSON.parse(fs.readFileSync(path.join(chartDir, 'dashboards', 'inboxd.json'), 'utf8'));
  const dash = JSON.parse(cm.data['inboxd.json']);
  const runbook = dash.templating.list.find((v) => v.name === 'runbook');
  assert.equal(runbook.query, V.dashboard.runbookUrl || 'docs', 'runbook URL');
  runbook.query = runbook.current.text = runbook.current.value = 'docs';
  assert.deepEqual(dash, shipped, 'the ConfigMap holds dashboards/inboxd.json');
}

/* The alerts an operator is promised (README "Which alert means what"), on inboxd's metrics. */
function checkRules(pr, V, fullname) {
  subset(pr.metadata.labels, V.prometheusRule.labels, 'PrometheusRule labels');
  assert.equal(pr.spec.groups.length, 1);
  const rules = Object.fromEntries(pr.spec.groups[0].rules.map((r) => [r.alert, r]));
  const want = ['InboxdDeadLetters', 'InboxdMessageTooOld', 'InboxdStalled', 'InboxdUncertainOutcomes'];
  want.push('InboxdOutboxFailed', 'InboxdRetriesSpiking', 'InboxdDuplicatesSpiking');
  want.push('InboxdThrottled', 'InboxdReceiveStalls');
  if (V.config.servicebus.entity_poll_s > 0)
    want.push('InboxdEntityDeadLettersRising', 'InboxdBacklogRising', 'InboxdOldestWaiting', 'InboxdEntityPollFailing');
  if (V.alerts.outboxMaxPendingSeconds > 0) want.push('InboxdOutboxBacklog');
  assert.deepEqual(Object.keys(rules).sort(), want.sort(), 'alert set');
  const metric = {
    InboxdDeadLetters: 'inboxd_dead_letters_total',
    InboxdMessageTooOld: 'inboxd_oldest_unsettled_enqueued_seconds',
    InboxdStalled: 'inboxd_messages_total',
    InboxdUncertainOutcomes: 'inboxd_uncertain_total',
    InboxdOutboxBacklog: 'inboxd_outbox_oldest_pending_seconds',
    InboxdOutboxFailed: 'inboxd_outbox_failed_total',
    InboxdRetriesSpiking: 'inboxd_retries_total',
    InboxdDuplicatesSpiking: 'inboxd_duplicates_total',
    InboxdThrottled: 'inboxd_throttled_seconds_total',
    InboxdReceiveStalls: 'inboxd_receive_stalls_total',
    InboxdEntityDeadLettersRising: 'inboxd_entity_messages',
    InboxdBacklogRising: 'inboxd_entity_messages',
    InboxdOldestWaiting: 'inboxd_entity_oldest_enqueued_age_seconds',
    InboxdEntityPollFailing: 'inboxd_entity_poll_up',
  };
  for (const [name, r] of Object.entries(rules)) {
    assert.ok(r.expr.includes(`${metric[name]}{namespace="apps", job="${fullname}"`), `${name} expr selects the release: ${r.expr}`);
    assert.ok(['warning', 'critical'].includes(r.labels.severity), `${name} severity`);
    subset(r.labels, V.prometheusRule.alertLabels, `${name} alert labels`);
    assert.ok(r.annotations.summary && r.annotations.description, `${name} annotations`);
    /* Balanced brackets: a template slip shows up here before Prometheus sees it. */
    for (const [o, c] of [['(', ')'], ['{', '}'], ['[', ']']])
      assert.equal(r.expr.split(o).length, r.expr.split(c).length, `${name} ${o}${c} balanced`);
  }
  assert.ok(rules.InboxdMessageTooOld.expr.endsWith(`> ${V.alerts.maxAgeSeconds}`), 'max age threshold from alerts.maxAgeSeconds');
  assert.equal(rules.InboxdMessageTooOld.for, V.alerts.for);
  assert.ok(rules.InboxdStalled.expr.includes(`[${V.alerts.stalledMinutes}m]`), 'stall window');
  assert.ok(rules.InboxdStalled.expr.includes('inboxd_in_flight{'), 'stall needs work in flight');
  assert.ok(rules.InboxdDeadLetters.expr.includes('by (namespace, reason, class)'), 'dead letters by reason and class');
  assert.ok(rules.InboxdThrottled.expr.endsWith(`> ${V.alerts.throttledFraction}`), 'throttled fraction from alerts.throttledFraction');
  assert.equal(rules.InboxdThrottled.for, V.alerts.for);
}

/* ---- main ---- */

let failed = 0;
let passed = 0;
function test(name, fn) {
  try {
    const detail = fn();
    passed++;
    console.log(`ok   ${name}${detail ? ` (${detail})` : ''}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n     ${String(e.stack || e).split('\n').slice(0, 6).join('\n     ')}`);
  }
}

fs.mkdirSync(work, { recursive: true });
const bin = buildRenderer();
const known = knownKeys();

const cases = [['default', []]];
for (const f of fs.readdirSync(path.join(chartDir, 'ci')).filter((f) => f.endsWith('.yaml')).sort())
  cases.push([`ci/${f}`, [path.join(chartDir, 'ci', f)]]);

test('print-config key set is non-trivial', () => {
  for (const k of ['consumer', 'servicebus', 'db', 'shutdown', 'http'])
    assert.ok(k in known, `inboxd --print-config lacks ${k}`);
  assert.equal(known.shutdown.drain_timeout_s, true);
});

test('every values.yaml leaf has a comment', () => {
  /*
   * A leaf ("key: value") is documented when the line right above it is a
   * comment, or when one of its ancestor keys has a comment right above it
   * (a block documented as a whole, like podSecurityContext).
   */
  const lines = fs.readFileSync(path.join(chartDir, 'values.yaml'), 'utf8').split('\n');
  const indent = (l) => l.search(/\S/);
  const key = (l) => /^\s*[A-Za-z_][\w.-]*:/.test(l);
  const commented = (i) => i > 0 && /^\s*#/.test(lines[i - 1]);
  const parent = (i) => {
    for (let j = i - 1; j >= 0; j--)
      if (key(lines[j]) && indent(lines[j]) < indent(lines[i])) return j;
    return -1;
  };
  const bare = [];
  lines.forEach((l, i) => {
    const m = /^\s*[A-Za-z_][\w.-]*:\s*(.*)$/.exec(l);
    if (!m || m[1] === '' || m[1].startsWith('#')) return; /* a section */
    for (let j = i; j >= 0; j = parent(j)) if (commented(j)) return;
    bare.push(`${i + 1}: ${l.trim()}`);
  });
  assert.deepEqual(bare, []);
  return `${lines.length} lines`;
});

test('values.yaml config defaults are inboxd\'s own defaults', () => {
  /*
   * The chart restates inboxd's defaults so they are visible in values.yaml;
   * they must not drift from the binary's. consumer defaults to the release
   * name in the chart, and print-config shows retry.max_deliveries resolved
   * (-1 means one below the entity's MaxDeliveryCount).
   */
  const yaml = render(bin, []).values.config;
  const defaults = printedDefaults();
  const skip = new Set(['consumer', 'retry.max_deliveries']);
  const diff = [];
  const walk = (v, d, prefix) => {
    for (const [k, x] of Object.entries(v)) {
      const name = prefix + k;
      if (skip.has(name) || d === undefined || !(k in d)) continue;
      if (x && typeof x === 'object' && !Array.isArray(x)) walk(x, d[k], name + '.');
      else if (JSON.stringify(x) !== JSON.stringify(d[k])) diff.push(`${name}: chart ${JSON.stringify(x)}, inboxd ${JSON.stringify(d[k])}`);
    }
  };
  walk(yaml, defaults, '');
  assert.deepEqual(diff, []);
});

for (const [label, files] of cases)
  test(`render ${label}`, () => `${checkCase(label.replace(/\W/g, '_'), render(bin, files), known)} objects`);

test('every dashboard panel links to a section of docs/ that exists', () => {
  /* GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens. */
  const slug = (h) => h.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-');
  const anchorsOf = (file) => {
    const text = fs.readFileSync(path.join(repo, 'docs', file), 'utf8');
    return new Set(text.split('\n').filter((l) => /^#+ /.test(l)).map((l) => slug(l.replace(/^#+ /, ''))));
  };
  const dash = JSON.parse(fs.readFileSync(path.join(chartDir, 'dashboards', 'inboxd.json'), 'utf8'));
  const panels = dash.panels.filter((p) => p.type !== 'row');
  for (const p of panels) {
    assert.equal(p.links.length, 1, `${p.title}: one runbook link`);
    const m = /^\$\{runbook\}\/([a-z]+\.md)#(.+)$/.exec(p.links[0].url);
    assert.ok(m, `${p.title}: link ${p.links[0].url} is not \${runbook}/FILE.md#section`);
    assert.ok(fs.existsSync(path.join(repo, 'docs', m[1])), `${p.title}: no docs/${m[1]}`);
    assert.ok(anchorsOf(m[1]).has(m[2]), `${p.title}: docs/${m[1]} has no section #${m[2]}`);
  }
  assert.equal(new Set(dash.panels.map((p) => p.id)).size, dash.panels.length, 'panel ids unique');
  return `${panels.length} panels`;
});

test('the test itself catches a broken chart value', () => {
  /* A ConfigMap key inboxd does not know must be reported. */
  const extra = path.join(work, 'unknown-key.yaml');
  fs.writeFileSync(extra, 'config:\n  http:\n    listen_addr: "x"\n');
  const res = render(bin, [extra]);
  assert.throws(() => checkCase('unknown_key', res, known), /ConfigMap keys unknown to inboxd/);
});

const badDir = path.join(here, 'bad');
for (const f of fs.readdirSync(badDir).filter((f) => f.endsWith('.yaml')).sort()) {
  test(`bad/${f} is refused`, () => {
    const file = path.join(badDir, f);
    const m = /^# expect-error: (.+)$/m.exec(fs.readFileSync(file, 'utf8'));
    assert.ok(m, 'first line must be "# expect-error: TEXT"');
    const res = render(bin, [file]);
    assert.equal(res.ok, false, 'rendered although it should not');
    assert.ok(res.error.includes(m[1]), `error "${res.error}" lacks "${m[1]}"`);
  });
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
