/*
 * The outcome words: one list (wk_outcome.h) behind msg_done's result, the
 * /metrics result label and the README's outcome table. The README table
 * must list every outcome, in order, with its settlement and meaning. The
 * dead-letter reasons likewise: one list, and the README's reason table
 * lists every reason, in order, with its result, error class and meaning.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_test.h"
#include "wk_metrics.h"
#include "wk_outcome.h"

static const struct {
    const char *word, *settle, *doc;
} outcomes[] = {
#define ROW(name, word, settle, doc) {word, settle, doc},
    WK_OUTCOMES(ROW)
#undef ROW
};

static const struct {
    const char *word;
    wk_outcome_t outcome;
    ib_class_t cls;
    const char *doc;
} reasons[] = {
#define ROW(name, word, outcome, cls, doc) {word, WK_OUT_##outcome, cls, doc},
    WK_DL_REASONS(ROW)
#undef ROW
};

static void test_names(void)
{
    ASSERT_EQ(sizeof(outcomes) / sizeof(outcomes[0]), WK_OUT__COUNT);
    for (int o = 0; o < WK_OUT__COUNT; o++)
        ASSERT_STREQ(wk_outcome_name((wk_outcome_t)o), outcomes[o].word);
    ASSERT_STREQ(wk_outcome_name(WK_OUT_APPLIED), "applied");
    ASSERT_STREQ(wk_outcome_name(WK_OUT_LOCK_LOST), "lock_lost");
    ASSERT_STREQ(wk_outcome_name(WK_OUT__COUNT), "unknown");
}

/* Every outcome is a result label of inboxd_messages_total. */
static void test_metrics_labels(void)
{
    wk_metrics_t *m = wk_metrics_new("test");
    for (int o = 0; o < WK_OUT__COUNT; o++)
        wk_metrics_message(m, (wk_outcome_t)o);
    char *text = wk_metrics_render(m, NULL);
    for (int o = 0; o < WK_OUT__COUNT; o++) {
        char line[128];
        snprintf(line, sizeof(line), "inboxd_messages_total{result=\"%s\"} 1\n", outcomes[o].word);
        ASSERT_CONTAINS(text, line);
    }
    free(text);
    wk_metrics_free(m);
}

static void test_reason_names(void)
{
    ASSERT_EQ(sizeof(reasons) / sizeof(reasons[0]), WK_DL__COUNT);
    for (int r = 0; r < WK_DL__COUNT; r++) {
        ASSERT_STREQ(wk_dl_reason_name((wk_dl_reason_t)r), reasons[r].word);
        ASSERT_EQ(wk_dl_reason_outcome((wk_dl_reason_t)r), reasons[r].outcome);
        ASSERT_EQ(wk_dl_reason_class((wk_dl_reason_t)r), reasons[r].cls);
        /* A dead letter's outcome settles as a dead letter. */
        ASSERT_TRUE(reasons[r].outcome == WK_OUT_CONFLICT ||
                    reasons[r].outcome == WK_OUT_DEAD_LETTERED ||
                    reasons[r].outcome == WK_OUT_UNCERTAIN);
    }
    ASSERT_STREQ(wk_dl_reason_name(WK_DL_UNCERTAIN), "OutcomeUncertain");
    ASSERT_EQ(wk_dl_reason_class(WK_DL_UNCERTAIN), IB_CLASS_AMBIGUOUS);
    ASSERT_STREQ(wk_dl_reason_name(WK_DL__COUNT), "unknown");
}

/* A route binding's failure names its reason; a refused host is BindError, as the README says. */
static void test_bind_reasons(void)
{
    ASSERT_EQ(wk_dl_reason_of_bind(IB_E_INVALID_JSON), WK_DL_INVALID_JSON);
    ASSERT_EQ(wk_dl_reason_of_bind(IB_E_MISSING_FIELD), WK_DL_MISSING_FIELD);
    ASSERT_EQ(wk_dl_reason_of_bind(IB_E_INVAL), WK_DL_BAD_KEY);
    ASSERT_EQ(wk_dl_reason_of_bind(IB_E_NOT_ALLOWED), WK_DL_BIND_ERROR);
    ASSERT_EQ(wk_dl_reason_of_bind(IB_E_NOMEM), WK_DL_BIND_ERROR);
}

/*
 * Rows of the table of doc (under the source tree) between begin and end that start with "| `";
 * row_of(i, buf) writes the i-th expected row. Fails on the first
 * difference, printing both.
 */
static void check_readme_rows(const char *doc, const char *begin, const char *end, int count,
                              void (*row_of)(int, char *, size_t))
{
    char path[4096], line[1024], want[1024];
    int row = 0, in = 0;
    snprintf(path, sizeof(path), "%s/%s", INBOXD_SOURCE_DIR, doc);
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    while (fgets(line, sizeof(line), f)) {
        if (strstr(line, begin)) {
            in = 1;
            continue;
        }
        if (in && strstr(line, end))
            break;
        if (!in || strncmp(line, "| `", 3) != 0)
            continue;
        if (row >= count) {
            fclose(f);
            ASSERT_TRUE(!"README table has more rows than wk_outcome.h");
        }
        row_of(row, want, sizeof(want));
        if (strcmp(line, want) != 0) {
            fclose(f);
            ASSERT_STREQ(line, want);
        }
        row++;
    }
    fclose(f);
    ASSERT_TRUE(in);
    ASSERT_EQ(row, count);
}

static void reason_row(int r, char *buf, size_t size)
{
    snprintf(buf, size, "| `%s` | `%s` | %s | %s |\n", reasons[r].word,
             wk_outcome_name(reasons[r].outcome), ib_class_name(reasons[r].cls), reasons[r].doc);
}

static void test_readme_reasons(void)
{
    check_readme_rows("docs/messages.md", "<!-- dead-letter-reasons:begin -->", "<!-- dead-letter-reasons:end -->",
                      WK_DL__COUNT, reason_row);
}

static void outcome_row(int o, char *buf, size_t size)
{
    snprintf(buf, size, "| `%s` | %s | %s |\n", outcomes[o].word, outcomes[o].settle,
             outcomes[o].doc);
}

static void test_readme_table(void)
{
    check_readme_rows("docs/operations.md", "<!-- outcomes:begin -->", "<!-- outcomes:end -->", WK_OUT__COUNT,
                      outcome_row);
}

int main(void)
{
    RUN(test_names);
    RUN(test_metrics_labels);
    RUN(test_readme_table);
    RUN(test_reason_names);
    RUN(test_bind_reasons);
    RUN(test_readme_reasons);
    return ib_test_done();
}
