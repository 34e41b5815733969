/* The route key table against the compilers: a key outside the table is
 * refused in every scope, a route-level key whose kinds leave out action is
 * refused on an action route (and one that action takes is not), and the
 * integer keys' bounds are the table's. */
#include <stdlib.h>

#include "ib_test.h"
#include "rt_keys.h"
#include "rt_route.h"
#include "rt_route_test.h"

static const char *const route_keys[] = {
    "match",  "sql",  "params",          "idempotency_key", "payload_hash",
    "on_permanent",   "on_unique_violation", "constraints", "http", "emit",
    "emit_on_failure", "action", "reason", NULL};

static void test_every_route_key_in_table(void)
{
    for (int i = 0; route_keys[i]; i++)
        ASSERT_TRUE(rt_key_find(RT_SCOPE_ROUTE, route_keys[i]) != NULL);
    ASSERT_TRUE(rt_key_find(RT_SCOPE_ROUTE, "colour") == NULL);
    ASSERT_TRUE(rt_key_find(RT_SCOPE_HTTP, "match") == NULL);
}

static void test_unknown_in_every_scope(void)
{
    rt_routes_t rs;
    int n;
    char *e = compile_errors(
        "[{\"match\":{\"subject\":\"A\",\"colour\":1},\"sql\":\"select 1\","
        "  \"emit\":[{\"entity\":\"q\",\"message_id\":\"m:{message_id}\",\"colour\":1}]},"
        " {\"match\":\"*\",\"idempotency_key\":\"k:{$.id}\",\"http\":{\"url\":\"https://h/x\","
        "  \"colour\":1,\"reconcile\":{\"url\":\"https://h/y\",\"colour\":1}}}]",
        &n, &rs);
    ASSERT_CONTAINS(e, "config: routes[0].match.colour: unknown key");
    ASSERT_CONTAINS(e, "config: routes[0].emit[0].colour: unknown key");
    ASSERT_CONTAINS(e, "config: routes[1].http.colour: unknown key");
    ASSERT_CONTAINS(e, "config: routes[1].http.reconcile.colour: unknown key");
    ASSERT_EQ(n, 4);
    free(e);
    rt_routes_free(&rs);
}

/* Each route-level key, alone beside action "complete". */
static void test_action_kinds(void)
{
    for (int i = 0; route_keys[i]; i++) {
        const char *k = route_keys[i];
        const rt_key_t *d = rt_key_find(RT_SCOPE_ROUTE, k);
        char text[256], want[96];
        rt_routes_t rs;
        int n;
        if (strcmp(k, "match") == 0 || strcmp(k, "action") == 0 || strcmp(k, "reason") == 0)
            continue;
        snprintf(text, sizeof(text), "[{\"match\":\"*\",\"action\":\"complete\",\"%s\":1}]", k);
        char *e = compile_errors(text, &n, &rs);
        snprintf(want, sizeof(want), "config: routes[0].%s: not allowed with action", k);
        if (d->kinds & RT_KIND_ACTION)
            ASSERT_NOT_CONTAINS(e, want);
        else
            ASSERT_CONTAINS(e, want);
        free(e);
        rt_routes_free(&rs);
    }
}

static void test_int_bounds_from_table(void)
{
    const char *const ints[] = {"timeout_ms", "lease_s", "max_concurrent", "max_retry_after_s",
                                NULL};
    for (int i = 0; ints[i]; i++) {
        const rt_key_t *d = rt_key_find(RT_SCOPE_HTTP, ints[i]);
        char text[256], want[128];
        rt_routes_t rs;
        int n;
        ASSERT_TRUE(d->min < d->max);
        snprintf(text, sizeof(text),
                 "[{\"match\":\"*\",\"idempotency_key\":\"k:{$.id}\",\"http\":{"
                 "\"url\":\"https://h/x\",\"%s\":%ld}}]",
                 ints[i], d->max + 1);
        char *e = compile_errors(text, &n, &rs);
        snprintf(want, sizeof(want), "http.%s: must be an integer from %ld to %ld", ints[i],
                 d->min, d->max);
        ASSERT_CONTAINS(e, want);
        free(e);
        rt_routes_free(&rs);
    }
}

int main(void)
{
    RUN(test_every_route_key_in_table);
    RUN(test_unknown_in_every_scope);
    RUN(test_action_kinds);
    RUN(test_int_bounds_from_table);
    return ib_test_done();
}
