/*
 * sb_transport.c - the process's transport choice (sb_transport.h): the
 * configured mode and proxy, and auto's remembered leg.
 *
 * thread: sb_transport_set on the main thread before clients start; the
 * remembered choice is an atomic any connection thread may set once.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "sb_transport.h"
#include "sb_wsb.h"

static sb_transport_mode_t g_mode = SB_TRANSPORT_AUTO;
static char *g_proxy;     /* NULL: the environment */
static int g_ws_port;     /* 0: 443, or the Endpoint's under websockets */
static atomic_int g_kept; /* 0: not yet, 1: amqp, 2: websockets */

ib_err_t sb_transport_parse(const char *s, sb_transport_mode_t *mode)
{
    if (s && strcmp(s, "auto") == 0)
        *mode = SB_TRANSPORT_AUTO;
    else if (s && strcmp(s, "amqp") == 0)
        *mode = SB_TRANSPORT_AMQP;
    else if (s && strcmp(s, "websockets") == 0)
        *mode = SB_TRANSPORT_WEBSOCKETS;
    else
        return IB_E_CONFIG;
    return IB_E_OK;
}

const char *sb_transport_name(sb_transport_mode_t mode)
{
    return mode == SB_TRANSPORT_AMQP         ? "amqp"
           : mode == SB_TRANSPORT_WEBSOCKETS ? "websockets"
                                             : "auto";
}

void sb_transport_set(sb_transport_mode_t mode, const char *proxy, int ws_port)
{
    g_mode = mode;
    g_ws_port = ws_port;
    free(g_proxy);
    g_proxy = proxy ? strdup(proxy) : NULL;
    sb_wsb_proxy_secret(proxy);
}

sb_transport_mode_t sb_transport_mode(void)
{
    return g_mode;
}

int sb_transport_ws_port(void)
{
    return g_ws_port;
}

const char *sb_transport_proxy(void)
{
    return g_proxy;
}

bool sb_transport_choosing(bool connstr_ws, bool emulator)
{
    return g_mode == SB_TRANSPORT_AUTO && !connstr_ws && (!emulator || g_ws_port) &&
           !atomic_load(&g_kept);
}

bool sb_transport_next_ws(bool connstr_ws, bool emulator, unsigned attempt)
{
    if (connstr_ws || g_mode == SB_TRANSPORT_WEBSOCKETS)
        return true;
    if (g_mode == SB_TRANSPORT_AMQP || (emulator && !g_ws_port))
        return false;
    if (sb_transport_choosing(connstr_ws, emulator))
        return attempt % 2 == 1;
    return atomic_load(&g_kept) == 2;
}

void sb_transport_keep(bool ws, const char *why)
{
    int expected = 0;

    if (g_mode != SB_TRANSPORT_AUTO ||
        !atomic_compare_exchange_strong(&g_kept, &expected, ws ? 2 : 1))
        return;
    IB_LOG(IB_LOG_INFO, "transport", IB_MSG("transport chosen for the process's life"),
           IB_S("transport", ws ? "websockets" : "amqp"), IB_S("why", why));
}

void sb_transport_reset(void)
{
    atomic_store(&g_kept, 0);
}
