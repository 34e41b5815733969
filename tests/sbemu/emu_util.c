/*
 * emu_util.c - clocks, lock-token byte order, base64, percent-decoding and
 * the byte-keyed hash map of the emulator.
 */
#include "emu_util.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* thread: any */
int64_t emu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* thread: any */
int64_t emu_ms_to_ticks(int64_t unix_ms)
{
    return unix_ms * 10000 + INT64_C(621355968000000000);
}

/* 16 random bytes drawn once per process: every UUID starts from them. */
static uint8_t g_uuid_base[16];
static pthread_once_t g_uuid_once = PTHREAD_ONCE_INIT;

static void uuid_base_init(void)
{
    if (RAND_bytes(g_uuid_base, sizeof g_uuid_base) != 1) {
        /* The RNG never fails on Linux; fall back to something unique anyway. */
        uint64_t a = (uint64_t)emu_now_ms(), b = (uint64_t)getpid();
        memcpy(g_uuid_base, &a, 8);
        memcpy(g_uuid_base + 8, &b, 8);
    }
}

/*
 * thread: any. The process's random base with a counter added into its last
 * eight bytes: unique within the process (2^62 values before the variant
 * bits could repeat one) and different across runs; guessable only from
 * one already seen, which is enough for an emulator. One RAND_bytes per
 * lock token was a tenth of the emulator's work per message.
 */
void emu_uuid_new(uint8_t out[16])
{
    static uint64_t counter;
    uint64_t n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED), low = 0;
    pthread_once(&g_uuid_once, uuid_base_init);
    memcpy(out, g_uuid_base, 8);
    /* Big-endian: the variant bits below take the sum's top two bits, not its low ones. */
    for (int i = 8; i < 16; i++)
        low = low << 8 | g_uuid_base[i];
    low += n;
    for (int i = 15; i >= 8; i--, low >>= 8)
        out[i] = (uint8_t)low;
    out[6] = (uint8_t)((out[6] & 0x0f) | 0x40);
    out[8] = (uint8_t)((out[8] & 0x3f) | 0x80);
}

/* thread: any */
void emu_lock_swap(const uint8_t in[16], uint8_t out[16])
{
    uint8_t t[16];
    t[0] = in[3], t[1] = in[2], t[2] = in[1], t[3] = in[0];
    t[4] = in[5], t[5] = in[4];
    t[6] = in[7], t[7] = in[6];
    memcpy(t + 8, in + 8, 8);
    memcpy(out, t, 16);
}

/* thread: any */
void emu_uuid_str(const uint8_t id[16], char out[37])
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[id[i] >> 4];
        *p++ = hex[id[i] & 15];
    }
    *p = '\0';
}

/* thread: any */
void emu_base64(const uint8_t *in, size_t len, char *out)
{
    EVP_EncodeBlock((unsigned char *)out, in, (int)len);
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* thread: any */
long emu_base64_decode(const char *in, size_t inlen, uint8_t *out, size_t outsize)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    while (inlen > 0 && in[inlen - 1] == '=')
        inlen--;
    for (size_t i = 0; i < inlen; i++) {
        int v = b64val(in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n >= outsize)
                return -1;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return (long)n;
}

/* thread: any */
int emu_pct_decode(const char *in, size_t len, char *out, size_t size)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '%') {
            if (i + 2 >= len)
                return -1;
            char h[3] = {in[i + 1], in[i + 2], 0};
            char *end;
            long v = strtol(h, &end, 16);
            if (*end)
                return -1;
            c = (char)v;
            i += 2;
        }
        if (n + 1 >= size)
            return -1;
        out[n++] = c;
    }
    out[n] = '\0';
    return 0;
}

/* thread: any */
bool emu_ieq(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen != blen)
        return false;
    for (size_t i = 0; i < alen; i++) {
        char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z')
            x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (char)(y - 'A' + 'a');
        if (x != y)
            return false;
    }
    return true;
}

typedef struct emu_map_ent {
    struct emu_map_ent *next;
    void *value;
    size_t klen;
    uint64_t hash;
    unsigned char key[];
} emu_map_ent_t;

struct emu_map {
    emu_map_ent_t **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
};

static uint64_t map_hash(const void *key, size_t klen)
{
    /* FNV-1a: keys are lock tokens and message ids, not attacker-chosen. */
    const unsigned char *p = key;
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < klen; i++)
        h = (h ^ p[i]) * UINT64_C(1099511628211);
    return h;
}

/* thread: any (one owner) */
emu_map_t *emu_map_new(void)
{
    emu_map_t *map = calloc(1, sizeof *map);
    if (!map)
        return NULL;
    map->nbuckets = 64;
    map->buckets = calloc(map->nbuckets, sizeof *map->buckets);
    if (!map->buckets) {
        free(map);
        return NULL;
    }
    return map;
}

/* thread: any (one owner) */
void emu_map_free(emu_map_t *map)
{
    if (!map)
        return;
    for (size_t i = 0; i < map->nbuckets; i++) {
        emu_map_ent_t *e = map->buckets[i];
        while (e) {
            emu_map_ent_t *n = e->next;
            free(e);
            e = n;
        }
    }
    free(map->buckets);
    free(map);
}

static emu_map_ent_t **map_find(const emu_map_t *map, const void *key, size_t klen, uint64_t h)
{
    emu_map_ent_t **pp = &map->buckets[h & (map->nbuckets - 1)];
    while (*pp) {
        if ((*pp)->hash == h && (*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0)
            return pp;
        pp = &(*pp)->next;
    }
    return pp;
}

/* thread: any (one owner) */
void *emu_map_get(const emu_map_t *map, const void *key, size_t klen)
{
    emu_map_ent_t **pp = map_find(map, key, klen, map_hash(key, klen));
    return *pp ? (*pp)->value : NULL;
}

static void map_grow(emu_map_t *map)
{
    size_t nb = map->nbuckets * 2;
    emu_map_ent_t **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* keep working with longer chains */
    for (size_t i = 0; i < map->nbuckets; i++) {
        emu_map_ent_t *e = map->buckets[i];
        while (e) {
            emu_map_ent_t *n = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = n;
        }
    }
    free(map->buckets);
    map->buckets = b;
    map->nbuckets = nb;
}

/* thread: any (one owner) */
int emu_map_put(emu_map_t *map, const void *key, size_t klen, void *value)
{
    uint64_t h = map_hash(key, klen);
    emu_map_ent_t **pp = map_find(map, key, klen, h);
    if (*pp) {
        (*pp)->value = value;
        return 0;
    }
    emu_map_ent_t *e = malloc(sizeof *e + klen);
    if (!e)
        return -1;
    e->next = NULL;
    e->value = value;
    e->klen = klen;
    e->hash = h;
    memcpy(e->key, key, klen);
    *pp = e;
    if (++map->count > map->nbuckets)
        map_grow(map);
    return 0;
}

/* thread: any (one owner) */
void *emu_map_del(emu_map_t *map, const void *key, size_t klen)
{
    emu_map_ent_t **pp = map_find(map, key, klen, map_hash(key, klen));
    if (!*pp)
        return NULL;
    emu_map_ent_t *e = *pp;
    void *v = e->value;
    *pp = e->next;
    free(e);
    map->count--;
    return v;
}

/* thread: any (one owner) */
size_t emu_map_count(const emu_map_t *map)
{
    return map->count;
}

/* thread: any (one owner) */
void emu_map_each(const emu_map_t *map, void (*fn)(void *ctx, void *value), void *ctx)
{
    for (size_t i = 0; i < map->nbuckets; i++)
        for (emu_map_ent_t *e = map->buckets[i]; e; e = e->next)
            fn(ctx, e->value);
}
