/*
 * emu_entity_int.h - functions shared by emu_entity.c and emu_ns.c only.
 *
 * thread: proactor.
 */
#ifndef EMU_ENTITY_INT_H
#define EMU_ENTITY_INT_H

#include "emu_entity.h"

/* Frees every message of ent (namespace teardown). */
void emu_entity_clear(emu_entity_t *ent);
/* Lock expiry and scheduled messages of one entity; TTL too when ttl_scan. */
void emu_entity_tick(emu_entity_t *ent, int64_t now, bool ttl_scan);
/* Stores a new message of ent; takes a reference on blob. 0 or -1. */
int emu_entity_enqueue(emu_entity_t *ent, emu_blob_t *blob, int64_t now);
/* Returns a session's locked message to active (delivery count +1 if asked). */
void emu_msg_unlock(emu_msg_t *msg, bool count_delivery, int64_t now);
/* A message of session s was freed; frees s when nothing needs it. */
void emu_session_unref_msg(emu_entity_t *ent, emu_session_t *s);

#endif
