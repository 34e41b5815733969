/*
 * wk_outcome.c - the words of wk_outcome.h. thread: any.
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
