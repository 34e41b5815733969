/*
 * The outcome words: one list (wk_outcome.h) behind msg_done's result, the
 * /metrics result label and the README's outcome table. The README table
 * must list every outcome, in order, with its settlement and meaning.
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

static void test_readme_table(void)
{
    char path[4096], line[1024], want[1024];
    int row = 0, in = 0;
    snprintf(path, sizeof(path), "%s/README.md", INBOXD_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    while (fgets(line, sizeof(line), f)) {
        if (strstr(line, "<!-- outcomes:begin -->")) {
            in = 1;
            continue;
        }
        if (strstr(line, "<!-- outcomes:end -->"))
            break;
        if (!in || strncmp(line, "| `", 3) != 0)
            continue;
        if (row >= WK_OUT__COUNT) {
            fclose(f);
            ASSERT_TRUE(!"README outcome table has more rows than wk_outcome.h");
        }
        snprintf(want, sizeof(want), "| `%s` | %s | %s |\n", outcomes[row].word,
                 outcomes[row].settle, outcomes[row].doc);
        if (strcmp(line, want) != 0) {
            fclose(f);
            ASSERT_STREQ(line, want);
        }
        row++;
    }
    fclose(f);
    ASSERT_EQ(row, WK_OUT__COUNT);
}

int main(void)
{
    RUN(test_names);
    RUN(test_metrics_labels);
    RUN(test_readme_table);
    return ib_test_done();
}
