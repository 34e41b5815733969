/*
 * rt_json.h - reading a value of a message body without building a tree
 * (a parse failure is described by ib_json_error_describe, ib_json.h).
 *
 * thread: any.
 */
#ifndef RT_JSON_H
#define RT_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * The fast path for "$.path" sources. jansson builds a tree of the whole
 * body to read two fields of it; this checks the text in one pass, without
 * allocating, and then finds a field by skipping what lies before it.
 *
 * rt_json_checked is true only for a text that jansson's json_loadb with
 * JSON_DECODE_ANY | JSON_REJECT_DUPLICATES accepts. It answers false for
 * every invalid text and also for some valid ones it does not try to
 * prove (escaped object keys, objects of more than RT_JSON_KEYS_MAX
 * members, nesting deeper than RT_JSON_DEPTH_MAX, very long numbers): the
 * caller then asks jansson, which decides and names the error.
 */
#define RT_JSON_KEYS_MAX 64
#define RT_JSON_DEPTH_MAX 64
bool rt_json_checked(const char *text, size_t len);

/* One step of a path: an object member (name) or an array element (index). */
typedef struct rt_json_step {
    char *name; /* NULL for an index */
    size_t index;
} rt_json_step_t;

typedef enum {
    RT_JV_STRING,
    RT_JV_INTEGER,
    RT_JV_REAL,
    RT_JV_TRUE,
    RT_JV_FALSE,
    RT_JV_NULL,
    RT_JV_OBJECT,
    RT_JV_ARRAY,
} rt_json_kind_t;

/* A value inside the text: a string's span is between its quotes, still escaped. */
typedef struct rt_json_span {
    rt_json_kind_t kind;
    const char *at;
    size_t len;
    bool escaped; /* a string holding a backslash */
} rt_json_span_t;

/*
 * Finds the value at steps in a text rt_json_checked accepted. False when
 * a step is missing (a member not there, an index past the end, a step
 * into a value of another kind), as jansson's json_object_get and
 * json_array_get would find nothing.
 */
bool rt_json_find(const char *text, size_t len, const rt_json_step_t *steps, size_t nsteps,
                  rt_json_span_t *out);

/*
 * The text of a RT_JV_STRING span, unescaped, as a new NUL-terminated
 * string (the caller frees it); NULL when out of memory.
 */
char *rt_json_string(const rt_json_span_t *v);

#endif
