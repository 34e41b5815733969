/*
 * ib_json.h - describing a JSON parse failure without quoting the input.
 *
 * jansson's error text quotes the token it stopped at ("'}' expected near
 * 'xyz'"), which would copy a fragment of a message body (or of a secret in
 * an environment variable or a config file) into logs and dead-letter
 * descriptions. This gives the kind of error and where it is, nothing of
 * the text itself. Used by the config loader and the route binding.
 *
 * thread: any.
 */
#ifndef IB_JSON_H
#define IB_JSON_H

#include <jansson.h>
#include <stddef.h>

/*
 * Writes e.g. "invalid syntax at byte 17 (line 1, column 18)" into buf.
 * Returns buf.
 */
const char *ib_json_error_describe(const json_error_t *jerr, char *buf, size_t size);

#endif
