/*
 * wk_outcome.h - how a message ended: the one list of outcome words.
 *
 * The same word is msg_done's "result" field, the result label of
 * inboxd_messages_total, a key of the stats line's "messages" object and a
 * row of docs/operations.md's outcome table (a unit test compares that table with
 * this list). Add an outcome here and every one of them follows.
 *
 * thread: any (constant data).
 */
#ifndef WK_OUTCOME_H
#define WK_OUTCOME_H

#include "ib_err.h"

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

/*
 * The dead-letter reasons inboxd writes: the one list of reason words. The
 * word is the broker's DeadLetterReason, msg_done's "reason", the reason
 * label of inboxd_dead_letters_total and a row of docs/messages.md's dead-letter
 * reason table (a unit test compares that table with this list); the
 * outcome is msg_done's "result"; the class is the class label of
 * inboxd_dead_letters_total and the error class of the message. A route's
 * `action: "deadletter"` uses the route's own `reason` instead (outcome
 * dead_lettered, class permanent). Every dead letter goes through
 * wk_decide_dead_letter (wk_decide.h), which takes its word from here.
 *
 * `ambiguous` is an error class (may have acted, cannot tell); `uncertain`
 * is the inbox row state that records it and the outcome word; the reason
 * is OutcomeUncertain whichever path met it (an HTTP call, a commit whose
 * answer was lost).
 */
/* X(NAME, "Reason", OUTCOME, class, meaning) */
#define WK_DL_REASONS(X)                                                                           \
    X(KEY_CONFLICT, "IdempotencyKeyConflict", CONFLICT, IB_CLASS_PERMANENT,                        \
      "the idempotency key (or message-id) was applied with another body")                        \
    X(MALFORMED, "MalformedMessage", DEAD_LETTERED, IB_CLASS_PERMANENT,                            \
      "the AMQP message could not be decoded")                                                     \
    X(BAD_MESSAGE_ID, "InvalidMessageId", DEAD_LETTERED, IB_CLASS_PERMANENT,                       \
      "no message-id, one over 128 characters, holding a NUL byte or not UTF-8")                   \
    X(NO_ROUTE, "NoRoute", DEAD_LETTERED, IB_CLASS_PERMANENT, "no route matches")                  \
    X(INVALID_JSON, "InvalidJson", DEAD_LETTERED, IB_CLASS_PERMANENT,                              \
      "the body is not JSON where a route's path needs it")                                        \
    X(MISSING_FIELD, "MissingField", DEAD_LETTERED, IB_CLASS_PERMANENT,                            \
      "a path the route needs is absent (for an HTTP route's finishing SQL: in the answer; the "   \
      "row is `failed` with the remote status)")                                                   \
    X(BAD_KEY, "InvalidIdempotencyKey", DEAD_LETTERED, IB_CLASS_PERMANENT,                         \
      "the route's idempotency key (or a value templated from the message) is too long "       \
      "or unusable")                                                                           \
    X(BIND_ERROR, "BindError", DEAD_LETTERED, IB_CLASS_PERMANENT,                                  \
      "a route's value could not be bound")                                                        \
    X(HANDLER_ERROR, "HandlerError", DEAD_LETTERED, IB_CLASS_PERMANENT,                            \
      "a permanent database error (description: SQLSTATE, native code, driver message)")           \
    X(HTTP_REJECTED, "HttpRejected", DEAD_LETTERED, IB_CLASS_PERMANENT,                            \
      "an HTTP destination refused the call (4xx or 3xx); the row is `failed` with the status")    \
    X(ANSWER_NOT_STORED, "AnswerNotStored", DEAD_LETTERED, IB_CLASS_PERMANENT,                     \
      "a replay of a `failed` HTTP-route row whose call succeeded: the finishing SQL needs more "  \
      "of the answer than the row stores (status, remote id) and the destination is not "          \
      "`idempotent`, so it is not called again; the row stays `failed`: `inboxctl inbox resolve`") \
    X(UNCERTAIN, "OutcomeUncertain", UNCERTAIN, IB_CLASS_AMBIGUOUS,                                \
      "the effect may have happened and cannot be asked (an HTTP call, or a commit whose answer "   \
      "was lost); the row is `uncertain`: `inboxctl inbox resolve`")                               \
    X(CLAIM_MISSING, "ClaimCheckMissing", DEAD_LETTERED, IB_CLASS_PERMANENT,                     \
      "the blob a claim-checked message names does not exist (404)")                               \
    X(CLAIM_CHANGED, "ClaimCheckChanged", DEAD_LETTERED, IB_CLASS_PERMANENT,                     \
      "the blob is not the one the message names: its ETag or SHA-256 differs (or 412)")           \
    X(CLAIM_TOO_LARGE, "ClaimCheckTooLarge", DEAD_LETTERED, IB_CLASS_PERMANENT,                  \
      "the blob is larger than `claim_check.max_bytes` (its Content-Length, or its body as read)") \
    X(CLAIM_REFUSED, "ClaimCheckRefused", DEAD_LETTERED, IB_CLASS_PERMANENT,                     \
      "the storage account refused the fetch (403, 401 or another 4xx)")                           \
    X(RETRY_BUDGET, "RetryBudgetExhausted", DEAD_LETTERED, IB_CLASS_TRANSIENT,                     \
      "transient failures outlasted delivery `retry.max_deliveries` (description: the last "       \
      "error)")                                                                                    \
    X(MAX_AGE, "MaxAgeExceeded", DEAD_LETTERED, IB_CLASS_TRANSIENT,                                \
      "a transient failure of a message older than `retry.max_age_s` (description: the last "      \
      "error)")

typedef enum {
#define WK_OUTCOME_ENUM(name, word, settle, doc) WK_OUT_##name,
    WK_OUTCOMES(WK_OUTCOME_ENUM)
#undef WK_OUTCOME_ENUM
        WK_OUT__COUNT
} wk_outcome_t;

/* The outcome's word ("applied", ...); "unknown" for an out-of-range value. */
const char *wk_outcome_name(wk_outcome_t o);

typedef enum {
#define WK_DL_ENUM(name, word, outcome, cls, doc) WK_DL_##name,
    WK_DL_REASONS(WK_DL_ENUM)
#undef WK_DL_ENUM
        WK_DL__COUNT
} wk_dl_reason_t;

/* The reason's word ("HandlerError", ...); "unknown" for an out-of-range value. */
const char *wk_dl_reason_name(wk_dl_reason_t r);
/* The outcome a dead letter for r reports (WK_OUT_DEAD_LETTERED when out of range). */
wk_outcome_t wk_dl_reason_outcome(wk_dl_reason_t r);
/* The error class r stands for (IB_CLASS_PERMANENT when out of range). */
ib_class_t wk_dl_reason_class(wk_dl_reason_t r);
/*
 * The dead-letter reason of a route binding's failure (rt_route_bind and
 * the other rt_route_bind_*): InvalidJson, MissingField, BadKey (an
 * idempotency key over its limit), else BindError.
 */
wk_dl_reason_t wk_dl_reason_of_bind(ib_err_t rc);

#endif
