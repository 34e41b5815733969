/*
 * wk_outcome.c - the words of wk_outcome.h: outcomes and dead-letter
 * reasons. thread: any.
 */
#include "wk_outcome.h"

const char *wk_outcome_name(wk_outcome_t o)
{
    static const char *const names[WK_OUT__COUNT] = {
#define WK_OUTCOME_WORD(name, word, settle, doc) word,
        WK_OUTCOMES(WK_OUTCOME_WORD)
#undef WK_OUTCOME_WORD
    };
    return (unsigned)o < WK_OUT__COUNT ? names[o] : "unknown";
}

static const struct {
    const char *word;
    wk_outcome_t outcome;
    ib_class_t cls;
} reasons[WK_DL__COUNT] = {
#define WK_DL_ROW(name, word, outcome, cls, doc) {word, WK_OUT_##outcome, cls},
    WK_DL_REASONS(WK_DL_ROW)
#undef WK_DL_ROW
};

const char *wk_dl_reason_name(wk_dl_reason_t r)
{
    return (unsigned)r < WK_DL__COUNT ? reasons[r].word : "unknown";
}

wk_outcome_t wk_dl_reason_outcome(wk_dl_reason_t r)
{
    return (unsigned)r < WK_DL__COUNT ? reasons[r].outcome : WK_OUT_DEAD_LETTERED;
}

ib_class_t wk_dl_reason_class(wk_dl_reason_t r)
{
    return (unsigned)r < WK_DL__COUNT ? reasons[r].cls : IB_CLASS_PERMANENT;
}

wk_dl_reason_t wk_dl_reason_of_bind(ib_err_t rc)
{
    return rc == IB_E_INVALID_JSON    ? WK_DL_INVALID_JSON
           : rc == IB_E_MISSING_FIELD ? WK_DL_MISSING_FIELD
           : rc == IB_E_INVAL         ? WK_DL_BAD_KEY
                                      : WK_DL_BIND_ERROR; /* IB_E_NOT_ALLOWED among them */
}
