/*
 * sb_connstr.h - the Service Bus connection string users already have:
 *
 *   Endpoint=sb://host[:port]/;SharedAccessKeyName=NAME;SharedAccessKey=KEY
 *       [;EntityPath=ENTITY][;UseDevelopmentEmulator=true][;TransportType=AmqpWebSockets]
 *   Endpoint=sb://host/;SharedAccessSignature=SharedAccessSignature sr=...
 *
 * Parts are split on ';', each at its first '=' (values may contain '='),
 * keys and values trimmed, keys matched without regard to case. Unknown keys
 * are ignored, as the SDKs do; a key given twice is an error. A string
 * with no credential (only Endpoint, perhaps EntityPath) parses: Azure AD
 * workload identity brings its own tokens. Half a key pair does not.
 */
#ifndef SB_CONNSTR_H
#define SB_CONNSTR_H

#include <stdbool.h>

#include "ib_err.h"

typedef struct sb_connstr {
    char *host;        /* "ns.servicebus.windows.net" */
    int port;          /* explicit port, or 5671 (TLS) / 5672 (emulator) */
    bool port_given;   /* the Endpoint carried a port */
    char *endpoint;    /* normalised "sb://host[:port]/" */
    char *key_name;    /* NULL with a SharedAccessSignature */
    char *key;         /* secret; NULL with a SharedAccessSignature */
    char *sas;         /* secret; a complete "SharedAccessSignature ..." token */
    char *entity_path; /* NULL when absent */
    bool emulator;     /* UseDevelopmentEmulator=true: plain TCP, no TLS */
    bool websockets;   /* TransportType=AmqpWebSockets: AMQP over wss:// (sb_wsb.h) */
    unsigned sas_lifetime_s; /* not parsed: how long the SAS tokens signed with the key
                                last (servicebus.sas_token_lifetime_s); 0 = one hour */
} sb_connstr_t;

/*
 * Parses s into out (zeroed first). On failure returns IB_E_CONFIG with a
 * text naming the offending key; the text never contains a key or
 * signature. out holds nothing to free on failure.
 */
ib_err_t sb_connstr_parse(const char *s, sb_connstr_t *out, ib_error_t *err);
void sb_connstr_free(sb_connstr_t *cs);

#endif
