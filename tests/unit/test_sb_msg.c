/* Unit tests of the message decoder (amqp/sb_msg.c). */
#include <jansson.h>
#include <proton/codec.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_test.h"
#include "sb_enc.h"
#include "sb_msg.h"
#include "sb_out.h"
#include "sb_send.h"

static unsigned char buf[262144];

/* Encodes every top-level value of d; returns the length. */
static size_t encode(pn_data_t *d)
{
    ssize_t n = pn_data_encode(d, (char *)buf, sizeof(buf));
    return n > 0 ? (size_t)n : 0;
}

static void section(pn_data_t *d, unsigned long code)
{
    pn_data_put_described(d);
    pn_data_enter(d);
    pn_data_put_ulong(d, code);
}

static void put_str(pn_data_t *d, const char *s)
{
    pn_data_put_string(d, pn_bytes(strlen(s), s));
}

static void put_sym(pn_data_t *d, const char *s)
{
    pn_data_put_symbol(d, pn_bytes(strlen(s), s));
}

static size_t full_message(pn_data_t *d, unsigned wire_count)
{
    pn_uuid_t corr = {{0x6c, 0x12, 0x28, 0x9e, 0x38, 0xcd, 0x01, 0x4b, 0xa0, 0x52, 0xba, 0xf9, 0x25,
                       0xd0, 0x11, 0xef}};
    section(d, 0x70);
    pn_data_put_list(d);
    pn_data_enter(d);
    pn_data_put_bool(d, true);
    pn_data_put_null(d);
    pn_data_put_null(d);
    pn_data_put_null(d);
    pn_data_put_uint(d, wire_count);
    pn_data_exit(d);
    pn_data_exit(d);

    section(d, 0x72);
    pn_data_put_map(d);
    pn_data_enter(d);
    put_sym(d, "x-opt-sequence-number");
    pn_data_put_long(d, 42);
    put_sym(d, "x-opt-enqueued-time");
    pn_data_put_timestamp(d, 1700000000123LL);
    put_sym(d, "x-opt-locked-until");
    pn_data_put_timestamp(d, 1700000060123LL);
    put_sym(d, "x-opt-other");
    pn_data_put_list(d);
    pn_data_exit(d);
    pn_data_exit(d);

    section(d, 0x73);
    pn_data_put_list(d);
    pn_data_enter(d);
    pn_data_put_ulong(d, 77);       /* message-id */
    pn_data_put_null(d);            /* user-id */
    pn_data_put_null(d);            /* to */
    put_str(d, "order-placed");     /* subject */
    pn_data_put_null(d);            /* reply-to */
    pn_data_put_uuid(d, corr);      /* correlation-id */
    put_sym(d, "application/json"); /* content-type */
    pn_data_put_null(d);
    pn_data_put_null(d);
    pn_data_put_null(d);
    put_str(d, "sess-1"); /* group-id */
    pn_data_exit(d);
    pn_data_exit(d);

    section(d, 0x74);
    pn_data_put_map(d);
    pn_data_enter(d);
    put_str(d, "DeadLetterReason");
    put_str(d, "R1");
    put_str(d, "n");
    pn_data_put_int(d, -5);
    put_str(d, "b");
    pn_data_put_bool(d, true);
    put_str(d, "f");
    pn_data_put_double(d, 1.5);
    put_str(d, "z");
    pn_data_put_null(d);
    put_str(d, "u");
    pn_data_put_uuid(d, corr);
    pn_data_exit(d);
    pn_data_exit(d);

    section(d, 0x75);
    pn_data_put_binary(d, pn_bytes(6, "hello "));
    pn_data_exit(d);
    section(d, 0x75);
    pn_data_put_binary(d, pn_bytes(5, "world"));
    pn_data_exit(d);
    return encode(d);
}

static void test_full(void)
{
    pn_data_t *d = pn_data(0);
    size_t n = full_message(d, 2);
    sb_msg_t msg;
    ASSERT_TRUE(n > 0);
    ASSERT_EQ(sb_msg_decode(&msg, buf, n, true), IB_E_OK);
    ASSERT_STREQ(msg.message_id, "ulong:77");
    ASSERT_STREQ(msg.correlation_id, "uuid:6c12289e-38cd-014b-a052-baf925d011ef");
    ASSERT_STREQ(msg.subject, "order-placed");
    ASSERT_STREQ(msg.content_type, "application/json");
    ASSERT_STREQ(msg.session_id, "sess-1");
    ASSERT_EQ(msg.delivery_count, 3);
    ASSERT_EQ(msg.sequence_number, 42);
    ASSERT_EQ(msg.enqueued_ms, 1700000000123LL);
    ASSERT_EQ(msg.locked_until_ms, 1700000060123LL);
    ASSERT_EQ(msg.body_len, 11);
    ASSERT_TRUE(memcmp(msg.body, "hello world", 11) == 0);
    ASSERT_EQ(msg.nprops, 6);
    ASSERT_STREQ(msg.dead_letter_reason, "R1");
    ASSERT_TRUE(msg.dead_letter_description == NULL);
    ASSERT_EQ(sb_msg_prop(&msg, "n")->type, SB_PROP_INT64);
    ASSERT_EQ(sb_msg_prop(&msg, "n")->i, -5);
    ASSERT_EQ(sb_msg_prop(&msg, "b")->type, SB_PROP_BOOL);
    ASSERT_EQ(sb_msg_prop(&msg, "b")->i, 1);
    ASSERT_EQ(sb_msg_prop(&msg, "f")->type, SB_PROP_DOUBLE);
    ASSERT_TRUE(sb_msg_prop(&msg, "f")->d == 1.5);
    ASSERT_EQ(sb_msg_prop(&msg, "z")->type, SB_PROP_NULL);
    ASSERT_EQ(sb_msg_prop(&msg, "u")->type, SB_PROP_OTHER);
    ASSERT_STREQ(sb_msg_prop(&msg, "u")->str, "6c12289e-38cd-014b-a052-baf925d011ef");
    sb_msg_clear(&msg);

    /* Peeked: the wire count unchanged. */
    ASSERT_EQ(sb_msg_decode(&msg, buf, n, false), IB_E_OK);
    ASSERT_EQ(msg.delivery_count, 2);
    sb_msg_clear(&msg);
    pn_data_free(d);
}

/* A copy of the first n bytes of buf in a buffer of n + extra bytes, for sb_msg_decode_owned. */
static unsigned char *owned_copy(size_t n, size_t extra)
{
    unsigned char *b = malloc(n + extra);
    memcpy(b, buf, n);
    return b;
}

static void test_decode_owned(void)
{
    pn_data_t *d = pn_data(0);
    sb_msg_t msg;
    size_t n;
    unsigned char *b;

    /* One data section, then a footer: the body stays in the bytes given. */
    section(d, 0x73);
    pn_data_put_list(d);
    pn_data_enter(d);
    put_str(d, "m-1");
    pn_data_exit(d);
    pn_data_exit(d);
    section(d, 0x75);
    pn_data_put_binary(d, pn_bytes(7, "{\"a\":1}"));
    pn_data_exit(d);
    section(d, 0x78);
    pn_data_put_map(d);
    pn_data_exit(d);
    n = encode(d);
    b = owned_copy(n, 1);
    ASSERT_EQ(sb_msg_decode_owned(&msg, b, n, n + 1, true), IB_E_OK);
    ASSERT_TRUE(msg.owned == b);
    ASSERT_TRUE(msg.body > b && msg.body + msg.body_len < b + n);
    ASSERT_STREQ((char *)msg.body, "{\"a\":1}");
    ASSERT_STREQ(msg.message_id, "m-1");
    sb_msg_clear(&msg);
    ASSERT_TRUE(msg.owned == NULL && msg.body == NULL);

    /* No byte to spare for the NUL: copied, the bytes freed at once. */
    b = owned_copy(n, 0);
    ASSERT_EQ(sb_msg_decode_owned(&msg, b, n, n, true), IB_E_OK);
    ASSERT_TRUE(msg.owned == NULL);
    ASSERT_STREQ((char *)msg.body, "{\"a\":1}");
    sb_msg_clear(&msg);

    /* Two data sections: the body leaves the bytes and is whole. */
    pn_data_clear(d);
    n = full_message(d, 0);
    b = owned_copy(n, 1);
    ASSERT_EQ(sb_msg_decode_owned(&msg, b, n, n + 1, true), IB_E_OK);
    ASSERT_TRUE(msg.owned == NULL);
    ASSERT_EQ(msg.body_len, 11);
    ASSERT_STREQ((char *)msg.body, "hello world");
    sb_msg_clear(&msg);

    /* An amqp-value body is copied; malformed bytes are freed too. */
    pn_data_clear(d);
    section(d, 0x77);
    put_str(d, "text");
    pn_data_exit(d);
    n = encode(d);
    b = owned_copy(n, 1);
    ASSERT_EQ(sb_msg_decode_owned(&msg, b, n, n + 1, true), IB_E_OK);
    ASSERT_TRUE(msg.owned == NULL);
    ASSERT_STREQ((char *)msg.body, "text");
    sb_msg_clear(&msg);
    b = owned_copy(3, 1);
    ASSERT_EQ(sb_msg_decode_owned(&msg, b, 3, 4, true), IB_E_DECODE);
    sb_msg_clear(&msg);
    pn_data_free(d);
}

static void test_amqp_value_string(void)
{
    pn_data_t *d = pn_data(0);
    sb_msg_t msg;
    size_t n;
    section(d, 0x77);
    put_str(d, "{\"a\":1}");
    pn_data_exit(d);
    n = encode(d);
    ASSERT_EQ(sb_msg_decode(&msg, buf, n, true), IB_E_OK);
    ASSERT_EQ(msg.body_len, 7);
    ASSERT_STREQ((char *)msg.body, "{\"a\":1}");
    ASSERT_EQ(msg.delivery_count, 1); /* no header: first delivery */
    ASSERT_EQ(msg.sequence_number, -1);
    ASSERT_TRUE(msg.message_id == NULL);
    sb_msg_clear(&msg);
    pn_data_free(d);
}

static void test_unsupported_bodies(void)
{
    pn_data_t *d = pn_data(0);
    sb_msg_t msg;
    size_t n;

    section(d, 0x77);
    pn_data_put_map(d);
    pn_data_exit(d);
    n = encode(d);
    ASSERT_EQ(sb_msg_decode(&msg, buf, n, true), IB_E_DECODE);
    ASSERT_EQ(msg.decode_err.cls, IB_CLASS_PERMANENT);
    ASSERT_CONTAINS(msg.decode_err.text, "amqp-value");
    sb_msg_clear(&msg);

    pn_data_clear(d);
    section(d, 0x76);
    pn_data_put_list(d);
    pn_data_exit(d);
    n = encode(d);
    ASSERT_EQ(sb_msg_decode(&msg, buf, n, true), IB_E_DECODE);
    ASSERT_CONTAINS(msg.decode_err.text, "amqp-sequence");
    sb_msg_clear(&msg);
    pn_data_free(d);
}

static void test_malformed(void)
{
    pn_data_t *d = pn_data(0);
    sb_msg_t msg;
    size_t n = full_message(d, 0);
    static const unsigned char junk[] = {0x00, 0x53, 0x75, 0xb0, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const unsigned char plain[] = {0xa1, 0x02, 'h', 'i'};

    /* Every truncation of a valid message decodes or fails cleanly. */
    for (size_t cut = 0; cut < n; cut++) {
        sb_msg_decode(&msg, buf, cut, true);
        if (cut < n)
            ASSERT_TRUE(msg.decode_err.code == IB_E_DECODE || msg.decode_err.code == IB_E_OK);
        sb_msg_clear(&msg);
    }
    ASSERT_EQ(sb_msg_decode(&msg, buf, n - 1, true), IB_E_DECODE);
    sb_msg_clear(&msg);
    ASSERT_EQ(sb_msg_decode(&msg, junk, sizeof(junk), true), IB_E_DECODE);
    sb_msg_clear(&msg);
    ASSERT_EQ(sb_msg_decode(&msg, plain, sizeof(plain), true), IB_E_DECODE);
    ASSERT_CONTAINS(msg.decode_err.text, "described");
    sb_msg_clear(&msg);
    ASSERT_EQ(sb_msg_decode(&msg, plain, 0, true), IB_E_DECODE);
    sb_msg_clear(&msg);

    /* A header delivery-count of the wrong type. */
    pn_data_clear(d);
    section(d, 0x70);
    pn_data_put_list(d);
    pn_data_enter(d);
    for (int k = 0; k < 4; k++)
        pn_data_put_null(d);
    put_str(d, "three");
    pn_data_exit(d);
    pn_data_exit(d);
    n = encode(d);
    ASSERT_EQ(sb_msg_decode(&msg, buf, n, true), IB_E_DECODE);
    ASSERT_CONTAINS(msg.decode_err.text, "delivery-count");
    sb_msg_clear(&msg);
    pn_data_free(d);
}

static void test_guid(void)
{
    const unsigned char tag[16] = {0x9e, 0x28, 0x12, 0x6c, 0xcd, 0x38, 0x4b, 0x01,
                                   0xa0, 0x52, 0xba, 0xf9, 0x25, 0xd0, 0x11, 0xef};
    const unsigned char canon[16] = {0x6c, 0x12, 0x28, 0x9e, 0x38, 0xcd, 0x01, 0x4b,
                                     0xa0, 0x52, 0xba, 0xf9, 0x25, 0xd0, 0x11, 0xef};
    unsigned char u[16], back[16];
    char text[37];

    ASSERT_TRUE(sb_lock_token_from_tag(tag, 16, u, text));
    ASSERT_STREQ(text, "6c12289e-38cd-014b-a052-baf925d011ef");
    ASSERT_TRUE(memcmp(u, canon, 16) == 0);
    sb_guid_swap(u, back);
    ASSERT_TRUE(memcmp(back, tag, 16) == 0);
    ASSERT_TRUE(sb_guid_parse("6C12289E-38CD-014B-A052-BAF925D011EF", u));
    ASSERT_TRUE(memcmp(u, canon, 16) == 0);
    ASSERT_TRUE(!sb_guid_parse("6c12289e-38cd-014b-a052-baf925d011e", u));
    ASSERT_TRUE(!sb_guid_parse("6c12289e-38cd-014b-a052xbaf925d011ef", u));
    ASSERT_TRUE(!sb_guid_parse("6c12289e-38cd-014b-a052-baf925d011eg", u));
    ASSERT_TRUE(!sb_lock_token_from_tag(tag, 15, u, text));
    ASSERT_STREQ(text, "");
}

/* JSON -> application properties, the one rule (sb_out_props_from_json). */
static void test_props_from_json(void)
{
    sb_prop_t pr[5];
    size_t n = 9;
    ib_error_t err;
    json_t *j = json_loads("{\"s\":\"x\",\"i\":-3,\"d\":0.25,\"b\":false,\"z\":null}", 0, NULL);
    ASSERT_EQ(sb_out_props_from_json(j, pr, 5, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 5);
    ASSERT_STREQ(pr[0].key, "s");
    ASSERT_EQ(pr[0].type, SB_PROP_STRING);
    ASSERT_STREQ(pr[0].str, "x");
    ASSERT_EQ(pr[1].type, SB_PROP_INT64);
    ASSERT_EQ(pr[1].i, -3);
    ASSERT_EQ(pr[2].type, SB_PROP_DOUBLE);
    ASSERT_TRUE(pr[2].d == 0.25);
    ASSERT_EQ(pr[3].type, SB_PROP_BOOL);
    ASSERT_EQ(pr[3].i, 0);
    ASSERT_EQ(pr[4].type, SB_PROP_NULL);
    ASSERT_EQ(sb_out_props_from_json(j, pr, 4, &n, &err), IB_E_INVALID_JSON); /* no room */
    ASSERT_EQ(n, 0);
    ASSERT_CONTAINS(err.text, "at most 4");
    json_decref(j);
    j = json_loads("{\"a\":1,\"tags\":[1]}", 0, NULL);
    ASSERT_EQ(sb_out_props_from_json(j, pr, 5, &n, &err), IB_E_INVALID_JSON);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_CONTAINS(err.text, "properties.tags is a JSON array");
    ASSERT_EQ(n, 0);
    json_decref(j);
    j = json_loads("{\"who\":{}}", 0, NULL);
    ASSERT_EQ(sb_out_props_from_json(j, pr, 5, &n, &err), IB_E_INVALID_JSON);
    ASSERT_CONTAINS(err.text, "properties.who is a JSON object");
    json_decref(j);
    j = json_loads("[1]", 0, NULL);
    ASSERT_EQ(sb_out_props_from_json(j, pr, 5, &n, &err), IB_E_INVALID_JSON);
    ASSERT_EQ(sb_out_props_from_json(NULL, pr, 5, &n, &err), IB_E_INVALID_JSON);
    json_decref(j);
}

static void test_utf8_cap(void)
{
    char big[5000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ASSERT_EQ(sb_utf8_cap("short", SB_REASON_MAX), 5);
    ASSERT_EQ(sb_utf8_cap(big, SB_REASON_MAX), 4096);
    /* "é" is 2 bytes at 4095..4096: the cut backs up to 4095. */
    big[4095] = (char)0xC3;
    big[4096] = (char)0xA9;
    ASSERT_EQ(sb_utf8_cap(big, SB_REASON_MAX), 4095);
    /* A 3-byte sequence starting at 4094. */
    big[4094] = (char)0xE2;
    big[4095] = (char)0x82;
    big[4096] = (char)0xAC;
    ASSERT_EQ(sb_utf8_cap(big, SB_REASON_MAX), 4094);
}

/* A message holding only a properties section whose message-id put() writes. */
static sb_msg_t *decode_id(void (*put)(pn_data_t *d, const void *arg), const void *arg)
{
    static sb_msg_t msg;
    pn_data_t *d = pn_data(0);
    size_t n;
    section(d, 0x73);
    pn_data_put_list(d);
    pn_data_enter(d);
    put(d, arg);
    pn_data_exit(d);
    pn_data_exit(d);
    n = encode(d);
    pn_data_free(d);
    sb_msg_decode(&msg, buf, n, true);
    return &msg;
}

static void put_id_str(pn_data_t *d, const void *arg)
{
    put_str(d, arg);
}

static void put_id_ulong(pn_data_t *d, const void *arg)
{
    pn_data_put_ulong(d, *(const unsigned long long *)arg);
}

static void put_id_binary(pn_data_t *d, const void *arg)
{
    pn_data_put_binary(d, pn_bytes(4, arg));
}

static void put_id_nul(pn_data_t *d, const void *arg)
{
    pn_data_put_string(d, pn_bytes(3, arg));
}

static void expect_id(sb_msg_t *msg, const char *want)
{
    ASSERT_EQ(msg->decode_err.code, IB_E_OK);
    ASSERT_STREQ(msg->message_id, want);
    ASSERT_TRUE(msg->message_id_problem == NULL);
    sb_msg_clear(msg);
}

/* Every id type renders to its own text: no two different ids collide. */
static void test_ids_distinct(void)
{
    unsigned long long n42 = 42;
    sb_msg_t *msg;
    expect_id(decode_id(put_id_str, "42"), "42");
    expect_id(decode_id(put_id_ulong, &n42), "ulong:42");
    expect_id(decode_id(put_id_str, "ulong:42"), "string:ulong:42");
    expect_id(decode_id(put_id_str, "string:x"), "string:string:x");
    expect_id(decode_id(put_id_str, "deadbeef"), "deadbeef");
    expect_id(decode_id(put_id_binary, "\xde\xad\xbe\xef"), "binary:deadbeef");
    expect_id(decode_id(put_id_str, "binary:deadbeef"), "string:binary:deadbeef");
    expect_id(decode_id(put_id_str, "uuidish"), "uuidish");

    /* A NUL byte: shown, and flagged so the worker dead-letters it. */
    msg = decode_id(put_id_nul, "a\0b");
    ASSERT_EQ(msg->decode_err.code, IB_E_OK);
    ASSERT_STREQ(msg->message_id, "a\\x00b");
    ASSERT_TRUE(msg->message_id_problem != NULL);
    sb_msg_clear(msg);
    msg = decode_id(put_id_nul, "a\0c");
    ASSERT_STREQ(msg->message_id, "a\\x00c");
    sb_msg_clear(msg);
}

/* More properties than are kept: a decode error, memory bounded, and the
 * broker's dead-letter fields still found after all of them. */
static void test_many_props(void)
{
    pn_data_t *d = pn_data(0);
    sb_msg_t msg;
    char key[32];
    size_t n;
    section(d, 0x74);
    pn_data_put_map(d);
    pn_data_enter(d);
    for (int i = 0; i < 6000; i++) {
        snprintf(key, sizeof key, "p%d", i);
        put_str(d, key);
        pn_data_put_int(d, i);
    }
    put_str(d, "DeadLetterReason");
    put_str(d, "MalformedMessage");
    put_str(d, "DeadLetterErrorDescription");
    put_str(d, "too many");
    pn_data_exit(d);
    pn_data_exit(d);
    n = encode(d);
    ASSERT_TRUE(n > 0);
    ASSERT_EQ(sb_msg_decode(&msg, buf, n, false), IB_E_DECODE);
    ASSERT_EQ(msg.nprops, 4096);
    ASSERT_STREQ(msg.dead_letter_reason, "MalformedMessage");
    ASSERT_STREQ(msg.dead_letter_description, "too many");
    sb_msg_clear(&msg);
    pn_data_free(d);
}

/* An id put on the wire the way sb_out_msg_set_id says to. */
static void put_out_id(pn_data_t *d, const void *arg)
{
    const sb_out_msg_t *m = arg;
    size_t n = m->message_id_len ? m->message_id_len : strlen(m->message_id);
    pn_uuid_t u;
    switch (m->message_id_type) {
    case SB_ID_ULONG:
        pn_data_put_ulong(d, strtoull(m->message_id, NULL, 10));
        break;
    case SB_ID_UUID:
        memcpy(u.bytes, m->message_id, 16);
        pn_data_put_uuid(d, u);
        break;
    case SB_ID_BINARY:
        pn_data_put_binary(d, pn_bytes(n, m->message_id));
        break;
    default:
        pn_data_put_string(d, pn_bytes(n, m->message_id));
    }
}

/* Sending again with the rendered id (dlq replay) renders the same text. */
static void test_ids_round_trip(void)
{
    static const char *const ids[] = {"plain",           "42",
                                      "ulong:42",        "string:ulong:42",
                                      "binary:deadbeef", "string:binary:x",
                                      "uuid:6c12289e-38cd-014b-a052-baf925d011ef"};
    for (size_t k = 0; k < sizeof(ids) / sizeof(ids[0]); k++) {
        sb_out_msg_t m = {0};
        unsigned char scratch[SB_ID_SCRATCH];
        sb_out_msg_set_id(&m, ids[k], scratch);
        expect_id(decode_id(put_out_id, &m), ids[k]);
    }
}

/* A message whose application properties only Proton's full types hold. */
static size_t typed_props_message(pn_data_t *d)
{
    section(d, 0x74);
    pn_data_put_map(d);
    pn_data_enter(d);
    put_str(d, "DeadLetterReason");
    put_str(d, "R1");
    put_str(d, "l");
    pn_data_put_list(d);
    pn_data_enter(d);
    pn_data_put_ubyte(d, 4);
    pn_data_put_char(d, 0x1f600);
    pn_data_exit(d);
    put_str(d, "t");
    pn_data_put_described(d);
    pn_data_enter(d);
    put_sym(d, "com.microsoft:timespan");
    pn_data_put_long(d, 36000000000LL);
    pn_data_exit(d);
    put_str(d, "c");
    pn_data_put_char(d, 'x');
    pn_data_exit(d);
    pn_data_exit(d);
    section(d, 0x75);
    pn_data_put_binary(d, pn_bytes(2, "{}"));
    pn_data_exit(d);
    return encode(d);
}

/* The application-properties map of an encoded message, left entered in d. */
static bool enter_app_props(pn_data_t *d, const char *enc, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n;
        pn_data_clear(d);
        n = pn_data_decode(d, enc + off, len - off);
        if (n <= 0)
            return false;
        off += (size_t)n;
        pn_data_rewind(d);
        pn_data_next(d);
        pn_data_enter(d);
        pn_data_next(d);
        if (pn_data_get_ulong(d) == 0x74) {
            pn_data_next(d);
            pn_data_enter(d);
            return true;
        }
    }
    return false;
}

/* dlq replay's path: the map kept as received, filtered, sent with one more. */
static void test_props_enc_round_trip(void)
{
    static const char *const drop[] = {"DeadLetterReason", "absent"};
    pn_data_t *d = pn_data(0);
    size_t n = typed_props_message(d), enc_len, out_len;
    unsigned char *enc;
    char *out;
    sb_msg_t msg;
    ib_error_t err;
    sb_prop_t extra = {.key = "x", .type = SB_PROP_INT64, .i = 7};
    sb_out_msg_t m = {.message_id = "m1", .nprops = 1, .props = &extra};
    char seen[64] = "";

    ASSERT_TRUE(n > 0);
    ASSERT_EQ(sb_msg_decode(&msg, buf, n, false), IB_E_OK);
    ASSERT_TRUE(msg.props_enc != NULL);
    ASSERT_EQ(sb_enc_skip(msg.props_enc, msg.props_enc_len), (long)msg.props_enc_len);
    ASSERT_EQ(sb_enc_map_filter(msg.props_enc, msg.props_enc_len, drop, 2, &enc, &enc_len, &err),
              IB_E_OK);
    m.props_enc = enc;
    m.props_enc_len = enc_len;
    ASSERT_EQ(sb_out_encode(&m, &out, &out_len, &err), IB_E_OK);
    ASSERT_TRUE(enter_app_props(d, out, out_len));
    while (pn_data_next(d)) {
        pn_bytes_t k = pn_data_get_string(d);
        pn_data_next(d);
        snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%.*s:%s ", (int)k.size,
                 k.start, pn_type_name(pn_data_type(d)));
        if (k.size == 1 && k.start[0] == 'l') {
            pn_data_enter(d);
            pn_data_next(d);
            ASSERT_EQ(pn_data_get_ubyte(d), 4);
            pn_data_next(d);
            ASSERT_EQ(pn_data_get_char(d), 0x1f600);
            pn_data_exit(d);
        }
    }
    ASSERT_STREQ(seen, "l:PN_LIST t:PN_DESCRIBED c:PN_CHAR x:PN_LONG ");
    free(out);
    free(enc);
    sb_msg_clear(&msg);

    /* Not one map: refused, nothing allocated. */
    ASSERT_EQ(sb_enc_map_filter((const unsigned char *)"\xc1\x05\x02\xa1\x01", 5, drop, 2, &enc,
                                &enc_len, &err),
              IB_E_DECODE);
    ASSERT_TRUE(enc == NULL);
    ASSERT_EQ(sb_enc_skip((const unsigned char *)"\xb1\x00\x00\x01\x00", 5), -1);
    ASSERT_EQ(sb_enc_skip((const unsigned char *)"\x00\x53\x74\x45", 4), 4);
    pn_data_free(d);
}

int main(void)
{
    RUN(test_full);
    RUN(test_decode_owned);
    RUN(test_amqp_value_string);
    RUN(test_unsupported_bodies);
    RUN(test_malformed);
    RUN(test_ids_distinct);
    RUN(test_many_props);
    RUN(test_ids_round_trip);
    RUN(test_props_enc_round_trip);
    RUN(test_guid);
    RUN(test_props_from_json);
    RUN(test_utf8_cap);
    return ib_test_done();
}
