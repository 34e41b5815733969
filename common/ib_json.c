/*
 * ib_json.c - JSON parse failures as kind and position only (see
 * ib_json.h). thread: any.
 */
#include "ib_json.h"

#include <stdio.h>

static const char *kind_of(enum json_error_code code)
{
    switch (code) {
    case json_error_out_of_memory:
        return "out of memory";
    case json_error_stack_overflow:
        return "nesting too deep";
    case json_error_invalid_utf8:
        return "invalid UTF-8";
    case json_error_premature_end_of_input:
        return "unexpected end of input";
    case json_error_end_of_input_expected:
        return "unexpected data after the value";
    case json_error_invalid_syntax:
        return "invalid syntax";
    case json_error_null_character:
        return "NUL character";
    case json_error_null_byte_in_key:
        return "NUL byte in an object key";
    case json_error_duplicate_key:
        return "duplicate object key";
    case json_error_numeric_overflow:
        return "number out of range";
    case json_error_cannot_open_file:
        return "cannot open the file";
    default:
        return "malformed JSON";
    }
}

const char *ib_json_error_describe(const json_error_t *jerr, char *buf, size_t size)
{
    snprintf(buf, size, "%s at byte %d (line %d, column %d)", kind_of(json_error_code(jerr)),
             jerr->position, jerr->line, jerr->column);
    return buf;
}
