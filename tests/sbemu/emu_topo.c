/*
 * emu_topo.c - topology JSON (jansson) into entities and faults.
 */
#include "emu_topo.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int err_at(char *err, size_t errlen, const char *where, const char *what)
{
    snprintf(err, errlen, "%s: %s", where, what);
    return -1;
}

/* Reads a non-negative integer key; absent keys leave *out alone. */
static int get_int(json_t *obj, const char *key, int *out, int max, const char *where, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    char w[256];
    snprintf(w, sizeof w, "%s.%s", where, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return err_at(err, errlen, w, "must be an integer in range");
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_bool(json_t *obj, const char *key, bool *out, const char *where, char *err,
                    size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v)) {
        char w[256];
        snprintf(w, sizeof w, "%s.%s", where, key);
        return err_at(err, errlen, w, "must be true or false");
    }
    *out = json_is_true(v);
    return 0;
}

static int check_keys(json_t *obj, const char *const *allowed, const char *where, char *err,
                      size_t errlen)
{
    const char *key;
    json_t *v;
    if (!json_is_object(obj))
        return err_at(err, errlen, where, "must be an object");
    json_object_foreach(obj, key, v)
    {
        bool ok = false;
        for (size_t i = 0; allowed[i]; i++)
            ok |= strcmp(allowed[i], key) == 0;
        if (!ok) {
            char w[256];
            snprintf(w, sizeof w, "%s.%s", where, key);
            return err_at(err, errlen, w, "unknown key");
        }
    }
    return 0;
}

static const char *const entity_keys[] = {"name",
                                          "lock_duration_s",
                                          "max_delivery_count",
                                          "requires_session",
                                          "duplicate_detection_window_s",
                                          "default_ttl_s",
                                          "dead_lettering_on_message_expiration",
                                          NULL};

static int parse_opts(json_t *obj, emu_entity_opts_t *o, const char *where, char *err,
                      size_t errlen)
{
    emu_entity_opts_default(o);
    if (get_int(obj, "lock_duration_s", &o->lock_duration_s, 300, where, err, errlen) ||
        get_int(obj, "max_delivery_count", &o->max_delivery_count, 1000000, where, err, errlen) ||
        get_bool(obj, "requires_session", &o->requires_session, where, err, errlen) ||
        get_int(obj, "duplicate_detection_window_s", &o->dup_window_s, 7 * 86400, where, err,
                errlen) ||
        get_int(obj, "default_ttl_s", &o->default_ttl_s, 1 << 30, where, err, errlen) ||
        get_bool(obj, "dead_lettering_on_message_expiration", &o->dead_letter_on_expiry, where, err,
                 errlen))
        return -1;
    if (o->lock_duration_s < 1)
        return err_at(err, errlen, where, "lock_duration_s must be at least 1");
    return 0;
}

static const char *get_name(json_t *obj, const char *where, char *err, size_t errlen)
{
    const char *name = json_string_value(json_object_get(obj, "name"));
    if (!name || !*name || strlen(name) > 200 || strchr(name, '/')) {
        err_at(err, errlen, where, "needs a \"name\" string without '/'");
        return NULL;
    }
    return name;
}

static int parse_faults(json_t *f, emu_faults_t *faults, char *err, size_t errlen)
{
    static const char *const keys[] = {
        "drop_after",      "drop_every_ms",     "refuse_renew", "lock_early_ms",
        "settle_delay_ms", "drop_settle_reply", "ignore_drain", "refuse_set_state",
        "stall_set_state", "busy_get_state", "busy_set_state", "ignore_dead_letter", "server_busy_for_ms", "server_busy_after",
        "stall_link", "stall_links", "idle_close_link_ms", "idle_close_conn_ms", NULL};
    if (check_keys(f, keys, "faults", err, errlen))
        return -1;
    const int max = 1 << 30;
    return get_int(f, "drop_after", &faults->drop_after, max, "faults", err, errlen) ||
                   get_int(f, "drop_every_ms", &faults->drop_every_ms, max, "faults", err,
                           errlen) ||
                   get_int(f, "refuse_renew", &faults->refuse_renew, max, "faults", err, errlen) ||
                   get_int(f, "lock_early_ms", &faults->lock_early_ms, max, "faults", err,
                           errlen) ||
                   get_int(f, "settle_delay_ms", &faults->settle_delay_ms, max, "faults", err,
                           errlen) ||
                   get_int(f, "drop_settle_reply", &faults->drop_settle_reply, max, "faults", err,
                           errlen) ||
                   get_int(f, "ignore_drain", &faults->ignore_drain, max, "faults", err,
                           errlen) ||
                   get_int(f, "refuse_set_state", &faults->refuse_set_state, max, "faults", err,
                           errlen) ||
                   get_int(f, "stall_set_state", &faults->stall_set_state, max, "faults", err,
                           errlen) ||
                   get_int(f, "busy_get_state", &faults->busy_get_state, max, "faults", err,
                           errlen) ||
                   get_int(f, "busy_set_state", &faults->busy_set_state, max, "faults", err,
                           errlen) ||
                   get_int(f, "ignore_dead_letter", &faults->ignore_dead_letter, max, "faults",
                           err, errlen) ||
                   get_int(f, "server_busy_for_ms", &faults->server_busy_for_ms, max, "faults",
                           err, errlen) ||
                   get_int(f, "server_busy_after", &faults->server_busy_after, max, "faults",
                           err, errlen) ||
                   get_int(f, "stall_link", &faults->stall_link, max, "faults", err, errlen) ||
                   get_int(f, "stall_links", &faults->stall_links, max, "faults", err, errlen) ||
                   get_int(f, "idle_close_link_ms", &faults->idle_close_link_ms, max, "faults",
                           err, errlen) ||
                   get_int(f, "idle_close_conn_ms", &faults->idle_close_conn_ms, max, "faults",
                           err, errlen)
               ? -1
               : 0;
}

static int parse_topic(emu_ns_t *ns, json_t *t, size_t idx, char *err, size_t errlen)
{
    static const char *const keys[] = {"name", "subscriptions", "duplicate_detection_window_s",
                                       "default_ttl_s", NULL};
    char where[256];
    snprintf(where, sizeof where, "topics[%zu]", idx);
    if (check_keys(t, keys, where, err, errlen))
        return -1;
    const char *name = get_name(t, where, err, errlen);
    if (!name)
        return -1;
    emu_entity_opts_t o;
    emu_entity_opts_default(&o);
    if (get_int(t, "duplicate_detection_window_s", &o.dup_window_s, 7 * 86400, where, err,
                errlen) ||
        get_int(t, "default_ttl_s", &o.default_ttl_s, 1 << 30, where, err, errlen))
        return -1;
    emu_entity_t *topic = emu_ns_add_topic(ns, name, &o);
    if (!topic)
        return err_at(err, errlen, where, "duplicate entity name");
    json_t *subs = json_object_get(t, "subscriptions");
    if (subs && !json_is_array(subs))
        return err_at(err, errlen, where, "subscriptions must be an array");
    size_t i;
    json_t *s;
    json_array_foreach(subs, i, s)
    {
        char w[300];
        snprintf(w, sizeof w, "%s.subscriptions[%zu]", where, i);
        if (check_keys(s, entity_keys, w, err, errlen))
            return -1;
        const char *sname = get_name(s, w, err, errlen);
        emu_entity_opts_t so;
        if (!sname || parse_opts(s, &so, w, err, errlen))
            return -1;
        if (!so.default_ttl_s)
            so.default_ttl_s = o.default_ttl_s;
        if (!emu_ns_add_subscription(ns, topic, sname, &so))
            return err_at(err, errlen, w, "duplicate subscription name");
    }
    return 0;
}

/* thread: main */
int emu_topo_parse(const char *json_text, emu_ns_t *ns, emu_faults_t *faults, char *err,
                   size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loads(json_text, 0, &jerr);
    if (!root) {
        snprintf(err, errlen, "topology: line %d: %s", jerr.line, jerr.text);
        return -1;
    }
    static const char *const keys[] = {"queues", "topics", "faults", NULL};
    int rc = -1;
    if (check_keys(root, keys, "topology", err, errlen))
        goto out;
    json_t *queues = json_object_get(root, "queues");
    json_t *topics = json_object_get(root, "topics");
    json_t *f = json_object_get(root, "faults");
    if ((queues && !json_is_array(queues)) || (topics && !json_is_array(topics))) {
        err_at(err, errlen, "topology", "queues and topics must be arrays");
        goto out;
    }
    size_t i;
    json_t *q;
    json_array_foreach(queues, i, q)
    {
        char where[64];
        snprintf(where, sizeof where, "queues[%zu]", i);
        if (check_keys(q, entity_keys, where, err, errlen))
            goto out;
        const char *name = get_name(q, where, err, errlen);
        emu_entity_opts_t o;
        if (!name || parse_opts(q, &o, where, err, errlen))
            goto out;
        if (!emu_ns_add_queue(ns, name, &o)) {
            err_at(err, errlen, where, "duplicate entity name");
            goto out;
        }
    }
    json_array_foreach(topics, i, q)
    {
        if (parse_topic(ns, q, i, err, errlen))
            goto out;
    }
    if (f && parse_faults(f, faults, err, errlen))
        goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* thread: main */
int emu_topo_load(const char *path, emu_ns_t *ns, emu_faults_t *faults, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "topology: cannot open %s", path);
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int c;
    while ((c = fgetc(fp)) != EOF) {
        if (len + 2 > cap) {
            size_t nc = cap ? cap * 2 : 4096;
            char *nb = realloc(buf, nc);
            if (!nb || nc > (64u << 20)) {
                free(nb ? nb : buf);
                fclose(fp);
                snprintf(err, errlen, "topology: %s too large", path);
                return -1;
            }
            buf = nb, cap = nc;
        }
        buf[len++] = (char)c;
    }
    fclose(fp);
    if (!buf) {
        snprintf(err, errlen, "topology: %s is empty", path);
        return -1;
    }
    buf[len] = '\0';
    int rc = emu_topo_parse(buf, ns, faults, err, errlen);
    free(buf);
    return rc;
}
