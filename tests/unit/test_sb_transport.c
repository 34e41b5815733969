/*
 * The process's transport choice (sb_transport.h): which leg each attempt
 * takes in every mode, auto's turns and its kept choice, and the proxy
 * picked from settings or the environment, shown without its password
 * (sb_wsb_proxy_pick).
 */
#include <stdlib.h>

#include "ib_test.h"
#include "sb_transport.h"
#include "sb_wsb.h"

static void test_modes(void)
{
    sb_transport_mode_t m;

    ASSERT_EQ(sb_transport_parse("websockets", &m), IB_E_OK);
    ASSERT_EQ(m, SB_TRANSPORT_WEBSOCKETS);
    ASSERT_EQ(sb_transport_parse("AmqpWebSockets", &m), IB_E_CONFIG);
    sb_transport_set(SB_TRANSPORT_AMQP, NULL, 0);
    ASSERT_EQ(sb_transport_next_ws(false, false, 1), 0);
    ASSERT_EQ(sb_transport_next_ws(true, false, 0), 1); /* TransportType=AmqpWebSockets */
    sb_transport_set(SB_TRANSPORT_WEBSOCKETS, NULL, 0);
    ASSERT_EQ(sb_transport_next_ws(false, true, 0), 1);
}

static void test_auto(void)
{
    sb_transport_reset();
    sb_transport_set(SB_TRANSPORT_AUTO, NULL, 0);
    ASSERT_TRUE(sb_transport_choosing(false, false));
    ASSERT_EQ(sb_transport_next_ws(false, false, 0), 0); /* AMQP first */
    ASSERT_EQ(sb_transport_next_ws(false, false, 1), 1);
    ASSERT_EQ(sb_transport_next_ws(false, false, 2), 0);
    ASSERT_EQ(sb_transport_next_ws(false, true, 1), 0); /* not for the emulator */
    sb_transport_set(SB_TRANSPORT_AUTO, NULL, 9443);    /* unless its WebSocket port is known */
    ASSERT_EQ(sb_transport_next_ws(false, true, 1), 1);
    ASSERT_EQ(sb_transport_ws_port(), 9443);
    sb_transport_keep(true, "test");
    ASSERT_TRUE(!sb_transport_choosing(false, false));
    ASSERT_EQ(sb_transport_next_ws(false, false, 0), 1);
    ASSERT_EQ(sb_transport_next_ws(false, false, 7), 1);
    sb_transport_keep(false, "later"); /* the first choice stays */
    ASSERT_EQ(sb_transport_next_ws(false, false, 2), 1);
    sb_transport_reset();
}

static void test_proxy_pick(void)
{
    char proxy[512], shown[512];

    sb_wsb_proxy_pick("http://u:pw-secret@proxy.corp:3128", "ns.example", proxy, sizeof(proxy),
                      shown, sizeof(shown));
    ASSERT_STREQ(proxy, "http://u:pw-secret@proxy.corp:3128");
    ASSERT_STREQ(shown, "http://proxy.corp:3128");
    setenv("HTTPS_PROXY", "http://a:b@envproxy:8080", 1);
    setenv("NO_PROXY", "localhost,.internal.example", 1);
    sb_wsb_proxy_pick(NULL, "ns.example", proxy, sizeof(proxy), shown, sizeof(shown));
    ASSERT_STREQ(shown, "http://envproxy:8080");
    sb_wsb_proxy_pick(NULL, "ns.internal.example", proxy, sizeof(proxy), shown, sizeof(shown));
    ASSERT_STREQ(proxy, "");
    sb_wsb_proxy_pick("", "ns.example", proxy, sizeof(proxy), shown, sizeof(shown));
    ASSERT_STREQ(proxy, "");
    unsetenv("HTTPS_PROXY");
    setenv("https_proxy", "proxy.lower:3128", 1);
    sb_wsb_proxy_pick(NULL, "ns.example", proxy, sizeof(proxy), shown, sizeof(shown));
    ASSERT_STREQ(shown, "proxy.lower:3128");
}

int main(void)
{
    RUN(test_modes);
    RUN(test_auto);
    RUN(test_proxy_pick);
    return ib_test_done();
}
