/*
 * wk_outcome.h - how a message ended: the one list of outcome words.
 *
 * The same word is msg_done's "result" field, the result label of
 * inboxd_messages_total, a key of the stats line's "messages" object and a
 * row of the README's outcome table (a unit test compares that table with
 * this list). Add an outcome here and every one of them follows.
 *
 * thread: any (constant data).
 */
#ifndef WK_OUTCOME_H
#define WK_OUTCOME_H

/* X(NAME, "word", settlement, meaning) */
#define WK_OUTCOMES(X)                                                                             \
    X(APPLIED, "applied", "complete", "the inbox transaction committed")                           \
    X(DUPLICATE, "duplicate", "complete",                                                          \
      "the inbox row (or, with `on_unique_violation`, the route's own unique key) was already "    \
      "there; no second effect")                                                                   \
    X(SKIPPED, "skipped", "complete", "the route's action is `complete`")                          \
    X(RECORDED, "recorded", "complete",                                                            \
      "a permanent failure recorded as a `failed` inbox row (`on_permanent: record`)")             \
    X(CONFLICT, "conflict", "dead-letter",                                                         \
      "`IdempotencyKeyConflict`: the key was applied with another body")                           \
    X(DEAD_LETTERED, "dead_lettered", "dead-letter",                                               \
      "a permanent failure, or a spent retry budget, with its reason")                             \
    X(UNCERTAIN, "uncertain", "dead-letter",                                                       \
      "`OutcomeUncertain`: an HTTP call may have acted and cannot be asked; recorded `uncertain`") \
    X(ABANDONED, "abandoned", "abandon", "transient failures outlasted the in-process retries")    \
    X(RELEASED, "released", "release",                                                             \
      "handed back unprocessed after its lock was lost (not counted when released at drain)")      \
    X(LOCK_LOST, "lock_lost", "(failed)",                                                          \
      "the settlement failed because the lock was gone; the broker redelivers it")                 \
    X(SETTLEMENT_UNKNOWN, "settlement_unknown", "(unanswered)",                                    \
      "the broker never answered the settlement (the link is recycled); it may have applied "      \
      "it, and a redelivery meets the inbox")

typedef enum {
#define WK_OUTCOME_ENUM(name, word, settle, doc) WK_OUT_##name,
    WK_OUTCOMES(WK_OUTCOME_ENUM)
#undef WK_OUTCOME_ENUM
        WK_OUT__COUNT
} wk_outcome_t;

/* The outcome's word ("applied", ...); "unknown" for an out-of-range value. */
const char *wk_outcome_name(wk_outcome_t o);

#endif
