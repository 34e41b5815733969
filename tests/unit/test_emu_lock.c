/*
 * test_emu_lock.c - lock-token byte order (wire reference §4.3) and uuid text.
 */
#include "emu_util.h"
#include "ib_test.h"

#include <string.h>

static void test_swap_matches_reference(void)
{
    /* The example of §4.3: tag on the transfer vs canonical uuid. */
    const uint8_t tag[16] = {0x9e, 0x28, 0x12, 0x6c, 0xcd, 0x38, 0x4b, 0x01,
                             0xa0, 0x52, 0xba, 0xf9, 0x25, 0xd0, 0x11, 0xef};
    const uint8_t canon[16] = {0x6c, 0x12, 0x28, 0x9e, 0x38, 0xcd, 0x01, 0x4b,
                               0xa0, 0x52, 0xba, 0xf9, 0x25, 0xd0, 0x11, 0xef};
    uint8_t out[16];
    emu_lock_swap(tag, out);
    ASSERT_TRUE(memcmp(out, canon, 16) == 0);
    emu_lock_swap(canon, out);
    ASSERT_TRUE(memcmp(out, tag, 16) == 0);
    char s[37];
    emu_uuid_str(canon, s);
    ASSERT_STREQ(s, "6c12289e-38cd-014b-a052-baf925d011ef");
}

static void test_swap_in_place_and_involution(void)
{
    uint8_t a[16], b[16];
    for (int i = 0; i < 16; i++)
        a[i] = (uint8_t)(i * 17 + 3);
    memcpy(b, a, 16);
    emu_lock_swap(b, b);
    ASSERT_TRUE(memcmp(a, b, 16) != 0);
    ASSERT_EQ(b[0], a[3]);
    ASSERT_EQ(b[4], a[5]);
    ASSERT_EQ(b[6], a[7]);
    ASSERT_EQ(b[15], a[15]);
    emu_lock_swap(b, b);
    ASSERT_TRUE(memcmp(a, b, 16) == 0);
}

static void test_uuid_new_is_v4_and_unique(void)
{
    uint8_t a[16], b[16];
    emu_uuid_new(a);
    emu_uuid_new(b);
    ASSERT_TRUE(memcmp(a, b, 16) != 0);
    ASSERT_EQ(a[6] >> 4, 4);
    ASSERT_EQ(a[8] >> 6, 2);
}

/* Lock tokens come from a base and a counter: many in a row stay distinct and v4-shaped. */
static void test_uuid_new_many_distinct(void)
{
    enum { N = 100000 };
    emu_map_t *seen = emu_map_new();
    int dummy = 0;
    for (int i = 0; i < N; i++) {
        uint8_t u[16];
        emu_uuid_new(u);
        ASSERT_EQ(u[6] >> 4, 4);
        ASSERT_EQ(u[8] >> 6, 2);
        ASSERT_TRUE(emu_map_get(seen, u, 16) == NULL);
        ASSERT_EQ(emu_map_put(seen, u, 16, &dummy), 0);
    }
    ASSERT_EQ(emu_map_count(seen), N);
    emu_map_free(seen);
}

static void test_ticks(void)
{
    ASSERT_EQ(emu_ms_to_ticks(0), 621355968000000000LL);
    ASSERT_EQ(emu_ms_to_ticks(1), 621355968000010000LL);
}

static void test_map(void)
{
    emu_map_t *m = emu_map_new();
    int vals[1000];
    for (int i = 0; i < 1000; i++) {
        vals[i] = i;
        ASSERT_EQ(emu_map_put(m, &i, sizeof i, &vals[i]), 0);
    }
    ASSERT_EQ(emu_map_count(m), 1000);
    int k = 777;
    ASSERT_TRUE(emu_map_get(m, &k, sizeof k) == &vals[777]);
    ASSERT_TRUE(emu_map_del(m, &k, sizeof k) == &vals[777]);
    ASSERT_TRUE(emu_map_get(m, &k, sizeof k) == NULL);
    ASSERT_EQ(emu_map_count(m), 999);
    emu_map_free(m);
}

int main(void)
{
    RUN(test_swap_matches_reference);
    RUN(test_swap_in_place_and_involution);
    RUN(test_uuid_new_is_v4_and_unique);
    RUN(test_uuid_new_many_distinct);
    RUN(test_ticks);
    RUN(test_map);
    return ib_test_done();
}
