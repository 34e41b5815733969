/*
 * sb_core.c - the connection: TLS or plain TCP, SASL ANONYMOUS, open/close,
 * the periodic tick, wake-ups, and dispatch of link events to $cbs and
 * $management (sb_rr.c) or to the owner (client or sender).
 */
#include "sb_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <proton/condition.h>
#include <proton/sasl.h>
#include <proton/transport.h>

#include "ib_enc.h"
#include "ib_log.h"
#include "ib_tls.h"
#include "sb_transport.h"
#include "sb_wsb.h"

#define SYSTEM_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define SYSTEM_CA_DIR "/etc/ssl/certs"

void sb_log_condition(const char *ev, const char *what, pn_condition_t *cond, ib_error_t *err)
{
    const char *name, *desc;
    if (!cond || !pn_condition_is_set(cond)) {
        IB_LOG(IB_LOG_INFO, ev, IB_MSG(what));
        return;
    }
    name = pn_condition_get_name(cond);
    desc = pn_condition_get_description(cond);
    IB_LOG(IB_LOG_WARN, ev, IB_MSG(what), IB_S("condition", name), IB_S("description", desc));
    if (err) {
        ib_err_t code = err->code != IB_E_OK ? err->code : IB_E_BROKER;
        ib_class_t cls = err->code != IB_E_OK ? err->cls : IB_CLASS_TRANSIENT;
        ib_error_set(err, code, cls, "%s: %s: %s", what, name ? name : "", desc ? desc : "");
        ib_strlcpy(err->condition, name ? name : "", sizeof(err->condition));
    }
}
/*
 * The system's trusted CAs for Proton: the hashed directory, read one
 * certificate at a time as a chain needs it (ib_tls.h), else the bundle.
 */
static const char *system_ca(void)
{
    const char *dir = ib_tls_system_ca_dir();
    if (dir && !strchr(dir, ':')) /* Proton takes one directory */
        return dir;
    return access(SYSTEM_CA_BUNDLE, R_OK) == 0 ? SYSTEM_CA_BUNDLE : SYSTEM_CA_DIR;
}


ib_err_t sb_core_init(sb_core_t *core, const char *connstr, const char *ca_file,
                      sb_token_get_fn token_get, void *token_ctx, unsigned op_timeout_ms,
                      const sb_core_hooks_t *hooks, ib_error_t *err)
{
    unsigned char rnd[6] = {0};
    char rnd_hex[2 * sizeof(rnd) + 1];
    FILE *fp;

    memset(core, 0, sizeof(*core));
    pthread_mutex_init(&core->wake_lock, NULL);
    if (sb_connstr_parse(connstr, &core->cs, err) != IB_E_OK)
        return err ? err->code : IB_E_CONFIG;
    if (!token_get && !core->cs.sas && !(core->cs.key && core->cs.key_name)) {
        sb_connstr_free(&core->cs);
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "servicebus.connection_string: no SharedAccessKeyName/SharedAccessKey "
                            "or SharedAccessSignature, and no token provider (for Azure AD set "
                            "servicebus.auth to workload_identity)");
    }
    core->token_get = token_get ? token_get : sb_token_from_connstr;
    core->token_ctx = token_get ? token_ctx : &core->cs;
    core->op_timeout_ms = op_timeout_ms ? op_timeout_ms : 30000;
    core->tick_ms = 100;
    core->hooks = *hooks;
    snprintf(core->ca_file, sizeof(core->ca_file), "%s", ca_file ? ca_file : "");
    fp = fopen("/dev/urandom", "rb");
    if (fp) {
        if (fread(rnd, 1, sizeof(rnd), fp) != sizeof(rnd))
            memset(rnd, 0, sizeof(rnd));
        fclose(fp);
    }
    ib_enc_hex(rnd_hex, rnd, sizeof(rnd));
    snprintf(core->container, sizeof(core->container), "inboxd-%s-%d", rnd_hex, (int)getpid());
    if (!core->cs.emulator) {
        const char *ca = ca_file && *ca_file ? ca_file : system_ca();
        core->ssl = pn_ssl_domain(PN_SSL_MODE_CLIENT);
        if (!core->ssl) {
            sb_connstr_free(&core->cs);
            return ib_error_set(err, IB_E_TLS, IB_CLASS_PERMANENT, "TLS is not available");
        }
        if (ca_file && *ca_file && access(ca_file, R_OK) != 0) {
            pn_ssl_domain_free(core->ssl);
            sb_connstr_free(&core->cs);
            return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                "servicebus.ca_file: %s cannot be read", ca_file);
        }
        if (pn_ssl_domain_set_trusted_ca_db(core->ssl, ca) != 0 ||
            pn_ssl_domain_set_peer_authentication(core->ssl, PN_SSL_VERIFY_PEER_NAME, NULL) != 0) {
            pn_ssl_domain_free(core->ssl);
            sb_connstr_free(&core->cs);
            return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                "servicebus.ca_file: %s holds no usable CA certificate", ca);
        }
    }
    core->proactor = pn_proactor();
    pn_proactor_set_timeout(core->proactor, core->tick_ms);
    return IB_E_OK;
}

void sb_core_fini(sb_core_t *core)
{
    if (core->proactor)
        pn_proactor_free(core->proactor);
    core->proactor = NULL;
    sb_rr_free_all(core);
    sb_cbs_free(core);
    if (core->ssl)
        pn_ssl_domain_free(core->ssl);
    core->ssl = NULL;
    sb_wsb_free(core->wsb);
    core->wsb = NULL;
    sb_connstr_free(&core->cs);
    pthread_mutex_destroy(&core->wake_lock);
}

/* Proton's window is (capacity - unread) / max_frame frames: this is "none". */
#define UNBOUNDED_WINDOW ((size_t)1 << 40)

pn_session_t *sb_core_session(sb_core_t *core, size_t window)
{
    pn_session_t *ssn = pn_session(core->conn);
    if (ssn && core->max_frame)
        pn_session_set_incoming_capacity(ssn, window >= core->max_frame ? window : UNBOUNDED_WINDOW);
    return ssn;
}

void sb_core_name(sb_core_t *core, const char *prefix, char *buf, size_t size)
{
    snprintf(buf, size, "%s-%s-%u", prefix, core->container, ++core->link_seq);
}

char *sb_core_audience(sb_core_t *core, const char *path)
{
    size_t n = strlen(core->cs.endpoint) + strlen(path) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", core->cs.endpoint, path[0] == '/' ? path + 1 : path);
    return s;
}

/*
 * Where this attempt connects: the namespace on its AMQP port, or the
 * WebSocket bridge on loopback (made on first use; TLS is then the outer
 * leg's, so the proactor's transport has none). False when the bridge
 * cannot start.
 */
static bool connect_target(sb_core_t *core, char *host, size_t hsize, int *port)
{
    core->via_ws = sb_transport_next_ws(core->cs.websockets, core->cs.emulator, core->attempts++);
    if (!core->via_ws) {
        snprintf(host, hsize, "%s", core->cs.host);
        *port = core->cs.port;
        return true;
    }
    if (!core->wsb) {
        bool explicit_ws = core->cs.websockets || sb_transport_mode() == SB_TRANSPORT_WEBSOCKETS;
        sb_wsb_opts_t o = {.host = core->cs.host,
                           .port = sb_transport_ws_port()               ? sb_transport_ws_port()
                                   : explicit_ws && core->cs.port_given ? core->cs.port
                                                                        : 443,
                           .tls = !core->cs.emulator,
                           .ca_file = core->ca_file[0] ? core->ca_file : NULL,
                           .proxy = sb_transport_proxy()};
        core->wsb = sb_wsb_new(&o, &core->last_err);
        if (!core->wsb)
            return false;
    }
    snprintf(host, hsize, "127.0.0.1");
    *port = sb_wsb_port(core->wsb);
    return true;
}

void sb_core_connect(sb_core_t *core)
{
    pn_transport_t *t;
    pn_sasl_t *sasl;
    pn_data_t *props;
    char addr[PN_MAX_ADDR], port[16], host[256];
    int portno;

    if (core->conn)
        return;
    ib_error_clear(&core->last_err);
    if (!connect_target(core, host, sizeof(host), &portno)) {
        snprintf(host, sizeof(host), "%s", core->cs.host);
        portno = core->cs.port;
        core->via_ws = false;
    }
    core->connect_started = ib_mono_ms();
    core->conn = pn_connection();
    pn_connection_set_container(core->conn, core->container);
    pn_connection_set_hostname(core->conn, core->cs.host);
    props = pn_connection_properties(core->conn);
    pn_data_put_map(props);
    pn_data_enter(props);
    sb_put_sym(props, "product");
    sb_put_str(props, "inboxd");
    pn_data_exit(props);
    t = pn_transport();
    pn_transport_set_idle_timeout(t, 60000);
    if (core->max_frame)
        pn_transport_set_max_frame(t, core->max_frame);
    sasl = pn_sasl(t);
    pn_sasl_allowed_mechs(sasl, "ANONYMOUS");
    if (core->ssl && !core->via_ws) {
        pn_ssl_t *ssl = pn_ssl(t);
        pn_ssl_init(ssl, core->ssl, NULL);
        pn_ssl_set_peer_hostname(ssl, core->cs.host);
    }
    pn_connection_open(core->conn);
    snprintf(port, sizeof(port), "%d", portno);
    pn_proactor_addr(addr, sizeof(addr), host, port);
    IB_LOG(IB_LOG_INFO, "connect", IB_MSG("connecting"), IB_S("host", core->cs.host),
           IB_I("port", core->cs.port), IB_B("tls", core->ssl != NULL),
           IB_S("transport", core->via_ws ? "websockets" : "amqp"));
    pthread_mutex_lock(&core->wake_lock);
    core->wake_conn = core->conn;
    pthread_mutex_unlock(&core->wake_lock);
    pn_proactor_connect2(core->proactor, core->conn, t, addr);
    /* $cbs attaches at once; everything else waits for a token. */
    sb_rr_mgmt(core, NULL);
}

void sb_core_close(sb_core_t *core)
{
    if (core->conn)
        pn_connection_close(core->conn);
}

void sb_core_wake(sb_core_t *core)
{
    pthread_mutex_lock(&core->wake_lock);
    if (core->wake_conn)
        pn_connection_wake(core->wake_conn);
    pthread_mutex_unlock(&core->wake_lock);
}

void sb_core_interrupt(sb_core_t *core)
{
    pn_proactor_interrupt(core->proactor);
}

/* Classifies the end of a transport for the owner. */
static void transport_error(sb_core_t *core, pn_transport_t *t, ib_error_t *why)
{
    pn_condition_t *cond = t ? pn_transport_condition(t) : NULL;
    const char *name = cond && pn_condition_is_set(cond) ? pn_condition_get_name(cond) : NULL;
    const char *desc =
        cond && pn_condition_is_set(cond) ? pn_condition_get_description(cond) : NULL;

    if (core->last_err.code != IB_E_OK) {
        *why = core->last_err; /* the remote close said why */
        return;
    }
    if (core->via_ws && core->wsb && sb_wsb_error(core->wsb, why))
        return; /* the bridge's outer leg failed: proxy, handshake or TLS */
    if (!name) {
        ib_error_set(why, IB_E_CLOSED, IB_CLASS_TRANSIENT, "connection closed");
        return;
    }
    if (core->ssl && desc &&
        (strstr(desc, "certificate") || strstr(desc, "SSL") || strstr(desc, "TLS") ||
         strstr(desc, "ssl") || strstr(desc, "verify") ||
         strcmp(name, "amqp:connection:framing-error") == 0)) {
        ib_error_set(why, IB_E_TLS, IB_CLASS_TRANSIENT, "TLS connection to %s:%d failed: %s: %s",
                     core->cs.host, core->cs.port, name, desc);
    } else {
        ib_error_set(why, IB_E_IO, IB_CLASS_TRANSIENT, "connection to %s:%d lost: %s: %s",
                     core->cs.host, core->cs.port, name, desc ? desc : "");
    }
    ib_strlcpy(why->condition, name, sizeof(why->condition));
}

/* The connection is gone: say why, reset what waited on it, tell the owner. */
static void on_transport_closed(sb_core_t *core, pn_transport_t *t)
{
    ib_error_t why;
    pn_condition_t *cond = pn_transport_condition(t);
    transport_error(core, t, &why);
    if (!core->via_ws)
        snprintf(core->amqp_why, sizeof(core->amqp_why), "%s", why.text);
    IB_LOG(
        why.code == IB_E_CLOSED ? IB_LOG_INFO : IB_LOG_WARN, "disconnect",
        IB_MSG("connection ended"), IB_S("error", ib_err_name(why.code)),
        IB_S("condition", cond && pn_condition_is_set(cond) ? pn_condition_get_name(cond) : NULL),
        IB_S("description",
             cond && pn_condition_is_set(cond) ? pn_condition_get_description(cond) : NULL));
    pthread_mutex_lock(&core->wake_lock);
    core->wake_conn = NULL;
    pthread_mutex_unlock(&core->wake_lock);
    core->conn = NULL;
    core->up = false;
    core->last_err = why;
    sb_rr_reset_all(core, &why);
    sb_cbs_reset(core);
    if (core->hooks.on_down)
        core->hooks.on_down(core->hooks.owner, &why);
    ib_error_clear(&core->last_err);
    core->last_err = why; /* kept for the sender's error text */
}

/* How long an attempt may wait for the AMQP open: auto gives AMQP a short time. */
static unsigned open_timeout_ms(const sb_core_t *core)
{
    if (!core->via_ws && sb_transport_choosing(core->cs.websockets, core->cs.emulator))
        return core->op_timeout_ms < SB_TRANSPORT_AUTO_MS ? core->op_timeout_ms
                                                          : SB_TRANSPORT_AUTO_MS;
    return core->op_timeout_ms;
}

/* The periodic work, on a wake of the connection (see PN_CONNECTION_WAKE). */
static void on_tick(sb_core_t *core)
{
    unsigned open_ms = open_timeout_ms(core);

    core->tick_due = false;
    if (!core->up && ib_mono_ms() - core->connect_started > (long long)open_ms) {
        /* TCP or TLS accepted but no AMQP open: give up on this attempt. */
        pn_transport_t *t = pn_connection_transport(core->conn);
        ib_error_set(&core->last_err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT,
                     "no AMQP open from %s:%d within %u ms", core->cs.host, core->cs.port, open_ms);
        IB_LOG(IB_LOG_WARN, "connect", IB_MSG(core->last_err.text));
        core->connect_started = ib_mono_ms(); /* once per attempt */
        if (t) {
            pn_transport_close_tail(t);
            pn_transport_close_head(t);
        }
    }
    sb_cbs_tick(core);
    sb_rr_tick(core);
    if (core->hooks.on_tick)
        core->hooks.on_tick(core->hooks.owner);
}

/* An AMQP open arrived: auto keeps the leg it came over, and says why. */
static void keep_transport(sb_core_t *core)
{
    char why[400];

    if (core->via_ws)
        snprintf(why, sizeof(why), "AMQP to %s:%d did not come up within %u ms (%s)", core->cs.host,
                 core->cs.port, SB_TRANSPORT_AUTO_MS,
                 core->amqp_why[0] ? core->amqp_why : "no answer");
    else
        snprintf(why, sizeof(why), "AMQP to %s:%d came up", core->cs.host, core->cs.port);
    sb_transport_keep(core->via_ws, why);
}

bool sb_core_handle(sb_core_t *core, pn_event_t *e)
{
    pn_link_t *link;

    switch (pn_event_type(e)) {
    case PN_CONNECTION_REMOTE_OPEN:
        if (pn_event_connection(e) == core->conn) {
            core->up = true;
            ib_error_clear(&core->last_err);
            keep_transport(core);
            IB_LOG(IB_LOG_INFO, "connect", IB_MSG("connected"), IB_S("host", core->cs.host),
                   IB_S("container", core->container));
            if (core->hooks.on_up)
                core->hooks.on_up(core->hooks.owner);
        }
        break;
    case PN_CONNECTION_REMOTE_CLOSE: {
        pn_connection_t *c = pn_event_connection(e);
        pn_condition_t *cond = pn_connection_remote_condition(c);
        if (cond && pn_condition_is_set(cond))
            ib_error_clear(&core->last_err); /* this close's condition, not an older error */
        sb_log_condition("connection_close", "the broker closed the connection", cond,
                         &core->last_err);
        if (core->last_err.code == IB_E_BROKER &&
            strcmp(core->last_err.condition, "amqp:unauthorized-access") == 0)
            core->last_err.code = IB_E_AUTH;
        pn_connection_close(c);
        break;
    }
    case PN_SESSION_REMOTE_CLOSE: {
        pn_session_t *s = pn_event_session(e);
        sb_log_condition("session_close", "the broker ended a session",
                         pn_session_remote_condition(s), NULL);
        pn_session_close(s);
        break;
    }
    case PN_TRANSPORT_ERROR:
        break; /* PN_TRANSPORT_CLOSED follows and reports it */
    case PN_TRANSPORT_CLOSED:
        on_transport_closed(core, pn_event_transport(e));
        break;
    case PN_CONNECTION_WAKE:
        /*
         * Proton writes a connection's frames only at the end of one of its
         * own event batches, so the periodic work runs here: the timeout
         * below just wakes the connection.
         */
        if (core->tick_due)
            on_tick(core);
        if (core->hooks.on_wake)
            core->hooks.on_wake(core->hooks.owner);
        break;
    case PN_PROACTOR_TIMEOUT:
        pn_proactor_set_timeout(core->proactor, core->tick_ms);
        if (core->conn) {
            core->tick_due = true;
            pn_connection_wake(core->conn);
        } else {
            sb_rr_tick(core); /* fails requests that waited too long */
            if (core->hooks.on_tick)
                core->hooks.on_tick(core->hooks.owner);
        }
        break;
    case PN_PROACTOR_INTERRUPT:
        if (core->conn)
            pn_connection_wake(core->conn); /* the owner reads its flags in on_wake */
        else if (core->hooks.on_interrupt)
            core->hooks.on_interrupt(core->hooks.owner);
        break;
    case PN_PROACTOR_INACTIVE:
        return false;
    case PN_LINK_REMOTE_OPEN:
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH:
    case PN_LINK_FLOW:
    case PN_DELIVERY:
        link = pn_event_link(e);
        if (!link)
            break;
        if (pn_event_type(e) != PN_LINK_FLOW && pn_event_type(e) != PN_DELIVERY &&
            pn_condition_is_set(pn_link_remote_condition(link)) &&
            strstr(pn_condition_get_name(pn_link_remote_condition(link)), "unauthorized-access"))
            sb_cbs_invalidate(core);
        if (!sb_rr_handle(core, e, link) && core->hooks.on_link_event)
            core->hooks.on_link_event(core->hooks.owner, e, link);
        break;
    default:
        break;
    }
    return true;
}
