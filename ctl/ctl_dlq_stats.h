/*
 * ctl_dlq_stats.h - `inboxctl dlq stats`: the dead letters of an entity
 * grouped by what sent them there, read by peek (no lock is taken, nothing
 * moves), and the group identity `inboxctl dlq replay --group` selects by.
 *
 * A group is one combination of: DeadLetterReason, inboxd's error class
 * (inboxd-error-class), route (inboxd-route), SQLSTATE/native code
 * (inboxd-sqlstate, inboxd-native-error) and the first line of
 * DeadLetterErrorDescription. Dead letters the broker wrote itself
 * (MaxDeliveryCountExceeded, TTLExpiredException) have no inboxd fields and
 * group by reason and description. Its id is a hash of those fields: the
 * same group has the same id in every run, so a replay interrupted part-way
 * and run again with the same --group moves only what is left.
 *
 * thread: the caller's (inboxctl's main thread).
 */
#ifndef CTL_DLQ_STATS_H
#define CTL_DLQ_STATS_H

#include <stdbool.h>
#include <stdio.h>

#include "sb_msg.h"
#include "sb_send.h"

/* Length of a group id (hex digits), without the NUL. */
#define CTL_DLQ_GROUP_ID_LEN 12
/* Groups kept; dead letters of further groups are counted as "other". */
#define CTL_DLQ_GROUPS_MAX 4096

/* Writes the group id of a dead-lettered message into id (CTL_DLQ_GROUP_ID_LEN + 1 bytes). */
void ctl_dlq_group_id(const sb_msg_t *msg, char *id);

/*
 * A ctl_replay_opts_t filter: true when msg belongs to the group whose id is
 * ctx (a const char *).
 */
bool ctl_dlq_group_filter(void *ctx, const sb_msg_t *msg);

/*
 * Peeks every message of entity's dead-letter queue (entity is a queue or
 * "topic/Subscriptions/sub") and writes the groups, largest first, with
 * counts and the oldest and newest enqueued times: a table, or one JSON
 * object with json. Returns 0, or 1 after a broker failure (said on stderr).
 */
int ctl_dlq_stats_run(sb_sender_t *snd, const char *entity, bool json, FILE *out);

#endif
