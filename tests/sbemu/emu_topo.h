/*
 * emu_topo.h - the emulator's topology file (queues, topics, subscriptions,
 * entity options, fault injection) parsed into a namespace.
 *
 * thread: main, before the proactor starts.
 */
#ifndef EMU_TOPO_H
#define EMU_TOPO_H

#include "emu_entity.h"

#include <stddef.h>

/* Fault injection knobs; 0 disables each. */
typedef struct emu_faults {
    int drop_after;        /* close a connection after this many deliveries on it */
    int drop_every_ms;     /* close every connection this often */
    int refuse_renew;      /* answer the next K renew-lock requests 410 lock-lost */
    int lock_early_ms;     /* locks really end this much before locked-until */
    int settle_delay_ms;   /* delay each settlement reply */
    int drop_settle_reply; /* apply but never answer the next K settlements */
    int ignore_drain;      /* leave the next K drains of an empty session unanswered */
    int refuse_set_state;  /* answer the next K set-session-state requests 500 internal-error */
    int busy_get_state;    /* answer the next K get-session-state requests 503 server-busy */
    int busy_set_state;    /* answer the next K set-session-state requests 503 server-busy */
    int stall_set_state;   /* leave the next K set-session-state requests unanswered */
    int ignore_dead_letter; /* neither apply nor answer the next K dead-letter dispositions */
    int server_busy_for_ms; /* answer com.microsoft:server-busy for this long ... */
    int server_busy_after;  /* ... from the N-th delivery on (0 = the first) */
    int stall_link;         /* the K-th receive link attached never gets a transfer, */
    int stall_links;        /* nor the ones after it up to this many in all (0 = 1) */
    int idle_close_link_ms; /* detach an entity link idle this long (amqp:link:detach-forced) */
    int idle_close_conn_ms; /* close a connection idle this long (amqp:connection:forced) */
} emu_faults_t;

/*
 * Parses topology JSON text into ns and faults (fields present in the file
 * override the ones already set). Unknown keys, wrong types and duplicate
 * names are errors. Returns 0, or -1 with a message naming the key in err.
 */
int emu_topo_parse(const char *json_text, emu_ns_t *ns, emu_faults_t *faults, char *err,
                   size_t errlen);

/* Reads the file at path and parses it as above. */
int emu_topo_load(const char *path, emu_ns_t *ns, emu_faults_t *faults, char *err, size_t errlen);

#endif
