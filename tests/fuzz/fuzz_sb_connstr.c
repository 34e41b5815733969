/* Fuzz target: the Service Bus connection-string parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sb_connstr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    sb_connstr_t cs;
    ib_error_t err;

    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (sb_connstr_parse(s, &cs, &err) == IB_E_OK) {
        /* Whatever parses has a host, and a whole key pair or none. */
        if (!cs.host || !cs.endpoint || (!cs.key != !cs.key_name) || (cs.sas && cs.key))
            abort();
        sb_connstr_free(&cs);
    } else if (!err.text[0]) {
        abort();
    }
    free(s);
    return 0;
}
