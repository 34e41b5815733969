/*
 * test_emu_codec.c - sbemu's section-level encoding: the delivered header
 * keeps delivery-count 0, broker annotations replace sender ones, message-id
 * assignment keeps every other byte, application-property merges.
 */
#include "emu_codec.h"
#include "ib_test.h"

#include <string.h>

/* properties(message-id "m1", subject "s") + app {"a": "x"} + data "body" */
static const uint8_t msg1[] = {0x00, 0x53, 0x73, 0xc0, 0x0a, 0x04, 0xa1, 0x02, 'm',
                               '1',  0x40, 0x40, 0xa1, 0x01, 's',  0x00, 0x53, 0x74,
                               0xc1, 0x07, 0x02, 0xa1, 0x01, 'a',  0xa1, 0x01, 'x',
                               0x00, 0x53, 0x75, 0xa0, 0x04, 'b',  'o',  'd',  'y'};

static void test_split_and_info(void)
{
    emu_sections_t s;
    emu_msg_info_t info;
    ASSERT_EQ(emu_msg_split(msg1, sizeof msg1, &s), 0);
    ASSERT_EQ(s.props.off, 0);
    ASSERT_EQ(s.app.off, 15);
    ASSERT_EQ(s.rest.off, 27);
    ASSERT_EQ(s.n_data, 1);
    ASSERT_EQ(emu_msg_info(msg1, &s, &info), 0);
    ASSERT_EQ(info.message_id.len, 4);
    ASSERT_TRUE(memcmp(msg1 + info.message_id.off, "\xa1\x02m1", 4) == 0);
    ASSERT_EQ(info.has_ttl, 0);
    ASSERT_TRUE(!emu_msg_is_batch(msg1, &s));
    const uint8_t bad[] = {0x00, 0x53, 0x73, 0xc0, 0x20, 0x01};
    ASSERT_EQ(emu_msg_split(bad, sizeof bad, &s), -1);
}

static void test_delivery_header_and_annotations(void)
{
    emu_sections_t s;
    emu_msg_info_t info;
    emu_msg_split(msg1, sizeof msg1, &s);
    emu_msg_info(msg1, &s, &info);
    emu_buf_t out = {0};
    emu_delivery_fields_t f = {.delivery_count = 0,
                               .seq = 7,
                               .enqueued_ms = 1000,
                               .locked_until_ms = 2000,
                               .message_state = -1};
    ASSERT_EQ(emu_encode_delivery(&out, msg1, &s, &info, &f), 0);
    /* Header list of 5 with delivery-count encoded as uint 0. */
    const uint8_t hdr[] = {0x00, 0x53, 0x70, 0xc0, 0x0a, 0x05, 0x42, 0x40,
                           0x40, 0x40, 0x70, 0,    0,    0,    0};
    ASSERT_TRUE(out.len > sizeof hdr && memcmp(out.data, hdr, sizeof hdr) == 0);
    ASSERT_TRUE(memmem(out.data, out.len, "x-opt-sequence-number", 21) != NULL);
    ASSERT_TRUE(memmem(out.data, out.len, "x-opt-locked-until", 18) != NULL);
    /* The result parses again and ends with the stored sections. */
    emu_sections_t s2;
    ASSERT_EQ(emu_msg_split(out.data, out.len, &s2), 0);
    ASSERT_EQ(s2.header.off, 0);
    ASSERT_TRUE(s2.mann.len > 0);
    ASSERT_TRUE(memcmp(out.data + out.len - (sizeof msg1), msg1, sizeof msg1) == 0);
    /* Re-delivering the delivered bytes does not duplicate broker keys. */
    emu_msg_info_t info2;
    emu_msg_info(out.data, &s2, &info2);
    emu_buf_t again = {0};
    f.locked_until_ms = 0;
    ASSERT_EQ(emu_encode_delivery(&again, out.data, &s2, &info2, &f), 0);
    ASSERT_TRUE(memmem(again.data, again.len, "x-opt-locked-until", 18) == NULL);
    emu_buf_free(&out);
    emu_buf_free(&again);
}

static void test_set_id(void)
{
    /* Same message without a message-id (null) in its properties. */
    uint8_t m[sizeof msg1];
    memcpy(m, msg1, sizeof msg1);
    emu_sections_t s;
    emu_msg_info_t info;
    const uint8_t noid[] = {0x00, 0x53, 0x73, 0xc0, 0x07, 0x04, 0x40, 0x40, 0x40,
                            0xa1, 0x01, 's',  0x00, 0x53, 0x75, 0xa0, 0x01, 'z'};
    ASSERT_EQ(emu_msg_split(noid, sizeof noid, &s), 0);
    emu_msg_info(noid, &s, &info);
    ASSERT_EQ(info.message_id.len, 0);
    emu_buf_t out = {0};
    ASSERT_EQ(emu_msg_set_id(noid, sizeof noid, &s, "abc", &out), 0);
    ASSERT_EQ(emu_msg_split(out.data, out.len, &s), 0);
    ASSERT_EQ(emu_msg_info(out.data, &s, &info), 0);
    ASSERT_EQ(info.message_id.len, 5);
    ASSERT_TRUE(memcmp(out.data + info.message_id.off,
                       "\xa1\x03"
                       "abc",
                       5) == 0);
    ASSERT_TRUE(memmem(out.data, out.len, "\xa1\x01s", 3) != NULL);
    emu_buf_free(&out);
    /* No properties section at all: one is inserted before the body. */
    const uint8_t bare[] = {0x00, 0x53, 0x75, 0xa0, 0x01, 'z'};
    emu_msg_split(bare, sizeof bare, &s);
    ASSERT_EQ(emu_msg_set_id(bare, sizeof bare, &s, "q", &out), 0);
    ASSERT_EQ(emu_msg_split(out.data, out.len, &s), 0);
    ASSERT_EQ(s.props.off, 0);
    ASSERT_EQ(s.rest.len, sizeof bare);
    emu_buf_free(&out);
}

static void test_app_merge_and_dead_letter(void)
{
    emu_sections_t s;
    emu_msg_split(msg1, sizeof msg1, &s);
    /* mods: {sym "a": "y", str "n": "v", str "DeadLetterReason": "r"} */
    const uint8_t mods[] = {0xc1, 0x22, 0x06, 0xa3, 0x01, 'a', 0xa1, 0x01, 'y', 0xa1, 0x01, 'n',
                            0xa1, 0x01, 'v',  0xa1, 0x10, 'D', 'e',  'a',  'd', 'L',  'e',  't',
                            't',  'e',  'r',  'R',  'e',  'a', 's',  'o',  'n', 0xa1, 0x01, 'r'};
    emu_buf_t out = {0};
    ASSERT_EQ(emu_encode_app_merge(&out, msg1 + s.app.off, s.app.len, mods, sizeof mods), 0);
    ASSERT_TRUE(memmem(out.data, out.len,
                       "\xa1\x01"
                       "a\xa1\x01y",
                       6) != NULL);                                 /* sym key became str */
    ASSERT_TRUE(memmem(out.data, out.len, "\xa1\x01x", 3) == NULL); /* old value replaced */
    ASSERT_TRUE(memmem(out.data, out.len, "DeadLetterReason", 16) == NULL);
    ASSERT_EQ(out.data[out.len - 1], 'v');
    emu_buf_t dl = {0};
    ASSERT_EQ(emu_encode_dead_letter_props(&dl, out.data, out.len, "Why", NULL), 0);
    ASSERT_TRUE(memmem(dl.data, dl.len, "DeadLetterReason", 16) != NULL);
    ASSERT_TRUE(memmem(dl.data, dl.len, "DeadLetterErrorDescription", 26) == NULL);
    emu_sections_t s3;
    ASSERT_EQ(emu_msg_split(dl.data, dl.len, &s3), 0);
    ASSERT_EQ(s3.app.len, dl.len);
    emu_buf_free(&out);
    emu_buf_free(&dl);
}

int main(void)
{
    RUN(test_split_and_info);
    RUN(test_delivery_header_and_annotations);
    RUN(test_set_id);
    RUN(test_app_merge_and_dead_letter);
    return ib_test_done();
}
