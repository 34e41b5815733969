/* Helpers of the amqp/ integration tests; see sbt.h. */
#include "sbt.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ib_log.h"

#ifndef SBEMU_PATH
#define SBEMU_PATH ""
#endif

long long sbt_ms(long long ms)
{
    const char *m = getenv("INBOXD_TEST_TIMEOUT_MULTIPLIER");
    double f = m ? atof(m) : 1.0;
    return f > 0 ? (long long)(ms * f) : ms;
}

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(1);
}

/* From here on an absent stats file is a failure (sbt_stat), not "not yet". */
static void wait_stats_file(const sbt_emu_t *emu)
{
    long long end = ib_mono_ms() + sbt_ms(5000);
    struct stat sb;
    while (stat(emu->stats, &sb) != 0 || sb.st_size == 0) {
        if (ib_mono_ms() >= end)
            die("sbemu wrote no stats file %s", emu->stats);
        usleep(20 * 1000);
    }
}

void sbt_emu_start(sbt_emu_t *emu, const char *topology, const char *const *extra)
{
    const char *bin = getenv("SBEMU") ? getenv("SBEMU") : SBEMU_PATH;
    char topo[300], line[256];
    const char *argv[64];
    int argc = 0, out[2];
    FILE *fp;

    memset(emu, 0, sizeof(*emu));
    if (!bin[0] || access(bin, X_OK) != 0)
        die("sbemu is missing (expected at '%s'): build the sbemu target first", bin);
    snprintf(emu->dir, sizeof(emu->dir), "/tmp/sbt-XXXXXX");
    if (!mkdtemp(emu->dir))
        die("cannot create a temporary directory: %s", strerror(errno));
    snprintf(topo, sizeof(topo), "%s/topology.json", emu->dir);
    snprintf(emu->stats, sizeof(emu->stats), "%s/stats.json", emu->dir);
    fp = fopen(topo, "w");
    if (!fp || fputs(topology, fp) < 0 || fclose(fp) != 0)
        die("cannot write %s", topo);
    argv[argc++] = bin;
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--topology";
    argv[argc++] = topo;
    argv[argc++] = "--key-name";
    argv[argc++] = "tester";
    argv[argc++] = "--key";
    argv[argc++] = "c2VjcmV0LWtleQ==";
    argv[argc++] = "--stats-file";
    argv[argc++] = emu->stats;
    argv[argc++] = "--stats-every-ms"; /* sbt_stat_fresh waits two rewrites; extra wins */
    argv[argc++] = "200";
    if (getenv("SBT_EMU_DEBUG")) {
        argv[argc++] = "--log-level";
        argv[argc++] = "debug";
    }
    for (int k = 0; extra && extra[k] && argc < 60; k++)
        argv[argc++] = extra[k];
    argv[argc] = NULL;
    if (pipe(out) != 0)
        die("pipe: %s", strerror(errno));
    emu->pid = fork();
    if (emu->pid == 0) {
        char logp[320];
        int fd;
        snprintf(logp, sizeof(logp), "%s/sbemu.log", emu->dir);
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive a killed test */
        fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(out[1], 1);
        if (fd >= 0)
            dup2(fd, 2);
        close(out[0]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    fp = fdopen(out[0], "r");
    if (!fp || !fgets(line, sizeof(line), fp) ||
        sscanf(line, "{\"event\":\"listening\",\"port\":%d}", &emu->port) != 1)
        die("sbemu did not start (see its log under %s)", emu->dir);
    /* Keep reading its stdout so it never blocks; the pipe closes when it exits. */
    if (fork() == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(1);
        close(2);
        while (fgets(line, sizeof(line), fp))
            ;
        _exit(0);
    }
    fclose(fp);
    wait_stats_file(emu);
    snprintf(emu->connstr, sizeof(emu->connstr),
             "Endpoint=sb://127.0.0.1:%d/;SharedAccessKeyName=tester;"
             "SharedAccessKey=c2VjcmV0LWtleQ==;UseDevelopmentEmulator=true",
             emu->port);
}

void sbt_emu_stop(sbt_emu_t *emu)
{
    char cmd[400];
    if (emu->pid > 0) {
        kill(emu->pid, SIGTERM);
        waitpid(emu->pid, NULL, 0);
        emu->pid = 0;
    }
    if (!getenv("SBT_KEEP") && emu->dir[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", emu->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", emu->dir);
    }
}

/* The stats file's root; ends the test when it cannot be read. */
static json_t *stats_root(const sbt_emu_t *emu)
{
    json_error_t je;
    json_t *root = json_load_file(emu->stats, 0, &je);
    if (!root) {
        fprintf(stderr, "cannot read the stats file %s: %s\n", emu->stats, je.text);
        exit(1);
    }
    return root;
}

/* entity's object in root; ends the test when the entity is absent. */
static json_t *entity_stats(const sbt_emu_t *emu, json_t *root, const char *entity)
{
    json_t *e = json_object_get(json_object_get(root, "entities"), entity);
    if (!json_is_object(e)) {
        fprintf(stderr, "no entity '%s' in the stats file %s\n", entity, emu->stats);
        exit(1);
    }
    return e;
}

long long sbt_stat(sbt_emu_t *emu, const char *entity, const char *field)
{
    json_t *root = stats_root(emu);
    json_t *v = json_object_get(entity_stats(emu, root, entity), field);
    if (!json_is_integer(v)) {
        fprintf(stderr, "entity '%s' has no counter '%s' in the stats file %s\n", entity, field,
                emu->stats);
        exit(1);
    }
    long long n = json_integer_value(v);
    json_decref(root);
    return n;
}

long long sbt_stat_reason(sbt_emu_t *emu, const char *entity, const char *reason)
{
    json_t *root = stats_root(emu);
    json_t *by = json_object_get(entity_stats(emu, root, entity), "dead_lettered_by_reason");
    if (!json_is_object(by)) {
        fprintf(stderr, "entity '%s' has no dead_lettered_by_reason in %s\n", entity, emu->stats);
        exit(1);
    }
    json_t *v = json_object_get(by, reason);
    long long n = json_is_integer(v) ? json_integer_value(v) : 0; /* reasons seen only */
    json_decref(root);
    return n;
}

long long sbt_stat_seq(sbt_emu_t *emu)
{
    json_t *root = stats_root(emu);
    json_t *v = json_object_get(root, "seq");
    if (!json_is_integer(v)) {
        fprintf(stderr, "no seq in the stats file %s\n", emu->stats);
        exit(1);
    }
    long long n = json_integer_value(v);
    json_decref(root);
    return n;
}

void sbt_stat_fresh(sbt_emu_t *emu, long long seq)
{
    long long end = ib_mono_ms() + sbt_ms(10000), now;
    while ((now = sbt_stat_seq(emu)) < seq + 2) {
        if (ib_mono_ms() >= end) {
            fprintf(stderr, "no stats file rendered after seq %lld (now %lld)\n", seq, now);
            exit(1);
        }
        usleep(50 * 1000);
    }
}

long long sbt_wait_stat(sbt_emu_t *emu, const char *entity, const char *field, long long want,
                        long long timeout_ms)
{
    long long end = ib_mono_ms() + sbt_ms(timeout_ms), v;
    for (;;) {
        v = sbt_stat(emu, entity, field);
        if (v == want || ib_mono_ms() >= end)
            return v;
        usleep(100 * 1000);
    }
}

void sbt_send(sbt_emu_t *emu, const char *entity, const char *prefix, int n, const char *session_id)
{
    sb_sender_options_t so = {emu->connstr, NULL, NULL, NULL, (unsigned)sbt_ms(10000), 0, 0};
    ib_error_t err;
    sb_sender_t *s = sb_sender_open(&so, &err);
    sb_out_msg_t *m = calloc((size_t)n, sizeof(*m));
    char(*ids)[64] = calloc((size_t)n, 64), (*bodies)[32] = calloc((size_t)n, 32);
    sb_prop_t prop = {"kind", SB_PROP_STRING, "test", 0, 0};
    if (!s) {
        fprintf(stderr, "sender open failed: %s\n", err.text);
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        snprintf(ids[i], 64, "%s-%d", prefix, i);
        snprintf(bodies[i], 32, "{\"n\":%d}", i);
        m[i].message_id = ids[i];
        m[i].subject = "test";
        m[i].session_id = session_id;
        m[i].props = &prop;
        m[i].nprops = 1;
        m[i].body = bodies[i];
        m[i].body_len = strlen(bodies[i]);
    }
    if (sb_sender_send(s, entity, m, (size_t)n, &err) != IB_E_OK) {
        fprintf(stderr, "send to %s failed: %s\n", entity, err.text);
        exit(1);
    }
    sb_sender_close(s);
    free(m);
    free(ids);
    free(bodies);
}

/* ---- the in-test worker ---- */

static void on_message(sb_msg_t *msg, void *ctx)
{
    sbt_rx_t *rx = ctx;
    pthread_mutex_lock(&rx->mu);
    rx->received++;
    rx->inflight++;
    if (rx->inflight > rx->max_inflight)
        rx->max_inflight = rx->inflight;
    if (rx->qn < SBT_MAX)
        rx->q[rx->qn++] = msg;
    pthread_cond_broadcast(&rx->cv);
    pthread_mutex_unlock(&rx->mu);
    if (rx->hook)
        rx->hook(rx, msg);
}

static void on_settled(sb_msg_t *msg, sb_disposition_t d, const ib_error_t *res, void *ctx)
{
    sbt_rx_t *rx = ctx;
    pthread_mutex_lock(&rx->mu);
    rx->settled++;
    rx->inflight--;
    if (res->code == IB_E_OK)
        rx->settled_ok++;
    if (res->code == IB_E_SHUTDOWN)
        rx->shutdown++;
    if (res->code == IB_E_SHUTDOWN && d == SB_COMPLETE)
        rx->shutdown_completes++;
    if ((unsigned)res->code < 64)
        rx->results[res->code]++;
    /* A message not yet taken by the test (shutdown) leaves the queue. */
    for (size_t k = 0; k < rx->qn; k++)
        if (rx->q[k] == msg) {
            rx->q[k] = rx->q[--rx->qn];
            break;
        }
    for (size_t k = 0; k < rx->nlost; k++)
        if (rx->lost[k] == msg) {
            rx->lost[k] = rx->lost[--rx->nlost];
            break;
        }
    pthread_cond_broadcast(&rx->cv);
    pthread_mutex_unlock(&rx->mu);
}

static void on_lock_lost(sb_msg_t *msg, void *ctx)
{
    sbt_rx_t *rx = ctx;
    pthread_mutex_lock(&rx->mu);
    rx->lock_lost++;
    if (rx->nlost < SBT_MAX)
        rx->lost[rx->nlost++] = msg;
    pthread_cond_broadcast(&rx->cv);
    pthread_mutex_unlock(&rx->mu);
}

static void on_state(int ready, const ib_error_t *why, void *ctx)
{
    sbt_rx_t *rx = ctx;
    pthread_mutex_lock(&rx->mu);
    rx->ready = ready;
    if (!ready && why)
        rx->last_why = why->code;
    pthread_cond_broadcast(&rx->cv);
    pthread_mutex_unlock(&rx->mu);
}

void sbt_rx_init(sbt_rx_t *rx)
{
    memset(rx, 0, sizeof(*rx));
    pthread_mutex_init(&rx->mu, NULL);
    ib_cond_init(&rx->cv);
}

void sbt_rx_destroy(sbt_rx_t *rx)
{
    pthread_mutex_destroy(&rx->mu);
    pthread_cond_destroy(&rx->cv);
}

void sbt_callbacks(sbt_rx_t *rx, sb_callbacks_t *cb)
{
    memset(cb, 0, sizeof(*cb));
    cb->on_message = on_message;
    cb->on_settled = on_settled;
    cb->on_lock_lost = on_lock_lost;
    cb->on_state = on_state;
    cb->ctx = rx;
}

sb_msg_t *sbt_take(sbt_rx_t *rx, long long timeout_ms)
{
    long long until = ib_mono_ms() + sbt_ms(timeout_ms);
    sb_msg_t *msg = NULL;
    pthread_mutex_lock(&rx->mu);
    while (rx->qn == 0)
        if (ib_cond_wait_until(&rx->cv, &rx->mu, until) != 0)
            break;
    if (rx->qn) {
        msg = rx->q[0];
        memmove(rx->q, rx->q + 1, (rx->qn - 1) * sizeof(rx->q[0]));
        rx->qn--;
    }
    pthread_mutex_unlock(&rx->mu);
    return msg;
}

bool sbt_wait_settled(sbt_rx_t *rx, int n, long long timeout_ms)
{
    long long until = ib_mono_ms() + sbt_ms(timeout_ms);
    bool ok;
    pthread_mutex_lock(&rx->mu);
    while (rx->settled < n)
        if (ib_cond_wait_until(&rx->cv, &rx->mu, until) != 0)
            break;
    ok = rx->settled >= n;
    pthread_mutex_unlock(&rx->mu);
    return ok;
}

bool sbt_wait_ready(sbt_rx_t *rx, long long timeout_ms)
{
    long long until = ib_mono_ms() + sbt_ms(timeout_ms);
    bool ok;
    pthread_mutex_lock(&rx->mu);
    while (!rx->ready)
        if (ib_cond_wait_until(&rx->cv, &rx->mu, until) != 0)
            break;
    ok = rx->ready;
    pthread_mutex_unlock(&rx->mu);
    return ok;
}

void sbt_options(sbt_emu_t *emu, const char *entity, sb_options_t *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->connection_string = emu->connstr;
    opt->entity = entity;
    opt->prefetch = 0;
    opt->max_concurrent_calls = 1;
    opt->max_concurrent_sessions = 1;
    opt->max_auto_lock_renewal_s = 300;
    opt->session_idle_timeout_s = 60;
    opt->reconnect_max_ms = 2000;
    opt->op_timeout_ms = 10000;
}

sb_client_t *sbt_client_start(const sb_options_t *opt, const sb_callbacks_t *cb)
{
    ib_error_t err;
    sb_client_t *c = sb_client_new(opt, cb, &err);
    if (!c)
        fprintf(stderr, "sb_client_new: %s\n", err.text);
    ASSERT_TRUE(c);
    ASSERT_EQ(sb_client_start(c), IB_E_OK);
    return c;
}
