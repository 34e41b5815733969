/*
 * emu_sasl.c - sbemu's server SASL: offers MSSBCBS (what .NET sends),
 * ANONYMOUS (JS, inboxd), PLAIN and EXTERNAL. Every mechanism but PLAIN
 * succeeds at once: Service Bus authenticates through $cbs. PLAIN carries
 * the SAS rule name and key; when sbemu has --key they must match, and the
 * connection is then authorized for the whole namespace.
 *
 * Proton-C's built-in server SASL (without Cyrus) only knows ANONYMOUS and
 * EXTERNAL, hence this small plug-in, installed per accepted transport.
 *
 * thread: proactor.
 */
#include "emu_broker.h"

#include "ib_log.h"

#include <proton/sasl_plugin.h>
#include <string.h>

static const char *sasl_mechs(pn_transport_t *t)
{
    (void)t;
    return "MSSBCBS ANONYMOUS PLAIN EXTERNAL";
}

static bool sasl_init_server(pn_transport_t *t)
{
    pnx_sasl_set_desired_state(t, SASL_POSTED_MECHANISMS);
    return true;
}

static bool sasl_init_client(pn_transport_t *t)
{
    (void)t;
    return false;
}

static void sasl_noop(pn_transport_t *t)
{
    (void)t;
}

/* PLAIN: [authzid] NUL authcid NUL passwd. */
static bool plain_ok(emu_conn_t *conn, const pn_bytes_t *recv)
{
    emu_broker_t *b = conn->b;
    if (!b->key)
        return true;
    if (!recv || !recv->start)
        return false;
    const char *p = recv->start, *end = recv->start + recv->size;
    const char *nul1 = memchr(p, 0, recv->size);
    if (!nul1)
        return false;
    const char *user = nul1 + 1;
    const char *nul2 = memchr(user, 0, (size_t)(end - user));
    if (!nul2)
        return false;
    const char *pass = nul2 + 1;
    size_t ul = (size_t)(nul2 - user), pl = (size_t)(end - pass);
    if (b->key_name && (ul != strlen(b->key_name) || memcmp(user, b->key_name, ul) != 0))
        return false;
    return pl == strlen(b->key) && memcmp(pass, b->key, pl) == 0;
}

static void sasl_process_init(pn_transport_t *t, const char *mech, const pn_bytes_t *recv)
{
    emu_conn_t *conn = pnx_sasl_get_context(t);
    if (strcmp(mech, "PLAIN") == 0) {
        if (!conn || !plain_ok(conn, recv)) {
            IB_LOG(IB_LOG_INFO, "sasl", IB_S("mechanism", mech), IB_S("result", "refused"));
            pnx_sasl_set_failed(t);
            pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
            return;
        }
        /* The key itself proves the caller: grant the namespace. */
        if (conn->b->key)
            emu_cbs_grant(conn, "", INT64_MAX / 2);
        pnx_sasl_set_succeeded(t, "plain", NULL);
    } else {
        pnx_sasl_set_succeeded(t, "anonymous", NULL);
    }
    IB_LOG(IB_LOG_DEBUG, "sasl", IB_S("mechanism", mech), IB_S("result", "ok"));
    pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
}

static void sasl_process_response(pn_transport_t *t, const pn_bytes_t *recv)
{
    (void)recv;
    pnx_sasl_set_failed(t);
    pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
}

static bool sasl_process_mechanisms(pn_transport_t *t, const char *mechs)
{
    (void)t;
    (void)mechs;
    return false;
}

static void sasl_process_bytes(pn_transport_t *t, const pn_bytes_t *recv)
{
    (void)t;
    (void)recv;
}

static bool sasl_can_encrypt(pn_transport_t *t)
{
    (void)t;
    return false;
}

static ssize_t sasl_max_encrypt(pn_transport_t *t)
{
    (void)t;
    return 0;
}

static ssize_t sasl_code(pn_transport_t *t, pn_bytes_t in, pn_bytes_t *out)
{
    (void)t;
    *out = in;
    return (ssize_t)in.size;
}

static const pnx_sasl_implementation emu_sasl_impl = {
    sasl_noop,          sasl_mechs,         sasl_init_server,      sasl_init_client,
    sasl_noop,          sasl_process_init,  sasl_process_response, sasl_process_mechanisms,
    sasl_process_bytes, sasl_process_bytes, sasl_can_encrypt,      sasl_max_encrypt,
    sasl_code,          sasl_code,
};

/* thread: proactor */
void emu_sasl_install(pn_transport_t *t, emu_conn_t *conn)
{
    pnx_sasl_set_implementation(t, &emu_sasl_impl, conn);
}
