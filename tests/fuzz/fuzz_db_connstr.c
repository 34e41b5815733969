/* Fuzz target: the ODBC connection-string parser and its redaction. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "db_connstr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), *r;
    db_connstr_t cs, again;

    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (db_connstr_parse(s, &cs, NULL) == IB_E_OK) {
        /* Redaction must produce a string that parses to the same keys. */
        r = db_connstr_redact(s);
        if (!r || db_connstr_parse(r, &again, NULL) != IB_E_OK || again.n != cs.n)
            abort();
        /* ...and every secret attribute now reads "***". */
        for (size_t k = 0; k < again.n; k++)
            if (db_connstr_key_is_secret(again.attrs[k].key) &&
                strcmp(again.attrs[k].value, "***") != 0)
                abort();
        db_connstr_free(&again);
        db_connstr_free(&cs);
        free(r);
    }
    free(s);
    return 0;
}
