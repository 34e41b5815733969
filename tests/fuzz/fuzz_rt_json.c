/*
 * Fuzz target: the checked JSON scan of body fields (route/rt_json.c)
 * against jansson. Whatever rt_json_checked accepts, jansson must accept
 * (with the flags inboxd parses bodies with), and every value
 * rt_json_find reaches must be the one jansson reads at that path.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_json.h"

#define PATH_MAX_STEPS 4

static const uint8_t *g_text;
static size_t g_len;

static void expect(bool cond)
{
    if (!cond)
        abort();
}

/* The span at steps must hold what jansson holds in v. */
static void same_value(const json_t *v, const rt_json_span_t *s)
{
    char num[64];

    if (json_is_integer(v) || json_is_real(v)) {
        expect(s->len < sizeof(num));
        memcpy(num, s->at, s->len);
        num[s->len] = '\0';
    }
    switch (json_typeof(v)) {
    case JSON_STRING: {
        char *t = rt_json_string(s);
        expect(s->kind == RT_JV_STRING && t && strlen(t) == json_string_length(v) &&
               strcmp(t, json_string_value(v)) == 0);
        free(t);
        break;
    }
    case JSON_INTEGER:
        expect(s->kind == RT_JV_INTEGER && strtoll(num, NULL, 10) == json_integer_value(v));
        break;
    case JSON_REAL:
        expect(s->kind == RT_JV_REAL && strtod(num, NULL) == json_real_value(v));
        break;
    case JSON_TRUE:
        expect(s->kind == RT_JV_TRUE);
        break;
    case JSON_FALSE:
        expect(s->kind == RT_JV_FALSE);
        break;
    case JSON_NULL:
        expect(s->kind == RT_JV_NULL);
        break;
    case JSON_OBJECT:
        expect(s->kind == RT_JV_OBJECT);
        break;
    case JSON_ARRAY:
        expect(s->kind == RT_JV_ARRAY);
        break;
    }
}

/* Compares v (at steps[0..n)) and, a few levels down, everything under it. */
static void walk(const json_t *v, rt_json_step_t *steps, size_t n)
{
    rt_json_span_t s;
    const char *key;
    json_t *m;
    size_t i;

    expect(rt_json_find((const char *)g_text, g_len, steps, n, &s));
    same_value(v, &s);
    if (n == PATH_MAX_STEPS)
        return;
    /* A member that is not there, an index past the end: nothing found. */
    steps[n] = (rt_json_step_t){json_is_object(v) ? "\001absent" : NULL, json_array_size(v)};
    expect(!rt_json_find((const char *)g_text, g_len, steps, n + 1, &s));
    json_object_foreach((json_t *)v, key, m)
    {
        steps[n] = (rt_json_step_t){(char *)key, 0};
        walk(m, steps, n + 1);
    }
    json_array_foreach(v, i, m)
    {
        steps[n] = (rt_json_step_t){NULL, i};
        walk(m, steps, n + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rt_json_step_t steps[PATH_MAX_STEPS + 1];
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);

    if (rt_json_checked((const char *)data, size)) {
        expect(j != NULL);
        g_text = data;
        g_len = size;
        walk(j, steps, 0);
    }
    json_decref(j);
    return 0;
}
