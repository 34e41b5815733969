/*
 * e2e_send_raw - sends one message whose fields are given as hex bytes, so
 * that end-to-end tests can put what inboxctl never would on the wire: a
 * message-id with a NUL byte, binary and ulong ids, invalid UTF-8 in the
 * subject, an id or a property value.
 *
 *   e2e_send_raw CONNECTION_STRING ENTITY ID_TYPE ID SUBJECT_HEX PROP_KEY PROP_HEX BODY
 *
 * ID_TYPE is string (ID is hex bytes), binary (ID is hex bytes) or ulong
 * (ID is decimal). PROP_KEY "" sends no property. BODY is sent as given.
 * Exit 0 when the broker accepted it. thread: main only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sb_send.h"

/* Hex text to bytes (NUL-terminated for convenience); *n gets the length. */
static char *unhex(const char *h, size_t *n)
{
    size_t len = strlen(h) / 2;
    char *out = malloc(len + 1);
    if (!out)
        exit(1);
    for (size_t k = 0; k < len; k++) {
        unsigned v;
        if (sscanf(h + 2 * k, "%2x", &v) != 1)
            exit(2);
        out[k] = (char)v;
    }
    out[len] = '\0';
    *n = len;
    return out;
}

int main(int argc, char **argv)
{
    sb_sender_options_t so = {0};
    sb_out_msg_t m = {0};
    sb_prop_t prop = {0};
    ib_error_t err;
    size_t n;
    sb_sender_t *s;
    char *id = NULL, *subject, *pval;

    if (argc != 9) {
        fprintf(stderr, "usage: e2e_send_raw CS ENTITY string|binary|ulong ID SUBJECT_HEX "
                        "PROP_KEY PROP_HEX BODY\n");
        return 2;
    }
    if (strcmp(argv[3], "ulong") == 0) {
        m.message_id = argv[4];
        m.message_id_type = SB_ID_ULONG;
    } else {
        id = unhex(argv[4], &n);
        m.message_id = id;
        m.message_id_len = n;
        m.message_id_type = strcmp(argv[3], "binary") == 0 ? SB_ID_BINARY : SB_ID_STRING;
    }
    subject = unhex(argv[5], &n);
    m.subject = n ? subject : NULL;
    pval = unhex(argv[7], &n);
    if (argv[6][0]) {
        prop.key = argv[6];
        prop.type = SB_PROP_STRING;
        prop.str = pval;
        m.props = &prop;
        m.nprops = 1;
    }
    m.body = argv[8];
    m.body_len = strlen(argv[8]);

    so.connection_string = argv[1];
    s = sb_sender_open(&so, &err);
    if (!s) {
        fprintf(stderr, "e2e_send_raw: %s\n", err.text);
        return 1;
    }
    if (sb_sender_send(s, argv[2], &m, 1, &err) != IB_E_OK) {
        fprintf(stderr, "e2e_send_raw: %s\n", err.text);
        sb_sender_close(s);
        return 1;
    }
    sb_sender_close(s);
    free(id);
    free(subject);
    free(pval);
    return 0;
}
