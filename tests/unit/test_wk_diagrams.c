/*
 * test_wk_diagrams.c - the Mermaid pictures in README.md and
 * docs/ARCHITECTURE.md name states and reasons as row=WORD, result=WORD,
 * reason=WORD and outbox=WORD; each word must be one of the code's tables
 * (inbox row states, outcomes, dead-letter reasons, the outbox's status
 * constraint), so a renamed state cannot leave a picture behind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_inbox.h"
#include "db_outbox.h"
#include "ib_test.h"
#include "wk_outcome.h"

static bool is_row_state(const char *w)
{
    return db_row_status_parse(w) != DB_ROW_UNKNOWN;
}

static bool is_result(const char *w)
{
    for (int o = 0; o < WK_OUT__COUNT; o++)
        if (strcmp(wk_outcome_name((wk_outcome_t)o), w) == 0)
            return true;
    return false;
}

static bool is_reason(const char *w)
{
    for (int r = 0; r < WK_DL__COUNT; r++)
        if (strcmp(wk_dl_reason_name((wk_dl_reason_t)r), w) == 0)
            return true;
    return false;
}

/* A status the outbox table's CHECK constraint allows ('WORD' in its DDL). */
static bool is_outbox_state(const char *w)
{
    char buf[8192], quoted[64];
    const char *stmts[8];
    size_t n = 8;
    if (db_outbox_sql_ddl(DB_DIALECT_POSTGRESQL, "inboxd_outbox", buf, sizeof buf, stmts, &n) !=
        IB_E_OK)
        return false;
    snprintf(quoted, sizeof quoted, "'%s'", w);
    return n > 0 && strstr(stmts[0], quoted) != NULL && strstr(stmts[0], "CHECK (status IN");
}

/* Checks every KIND=WORD of one diagram; *found: how many. */
static void check_words(const char *file, const char *block, int *found)
{
    static const char *const kinds[] = {"row=", "result=", "reason=", "outbox="};
    bool (*const known[])(const char *) = {is_row_state, is_result, is_reason, is_outbox_state};
    *found = 0;
    for (int k = 0; k < 4; k++) {
        for (const char *p = strstr(block, kinds[k]); p; p = strstr(p + 1, kinds[k])) {
            char w[64];
            size_t len = strspn(p + strlen(kinds[k]),
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_");
            snprintf(w, sizeof w, "%.*s", (int)len, p + strlen(kinds[k]));
            if (!known[k](w)) {
                fprintf(stderr, "%s: a diagram names %s%s, which the code does not have\n", file,
                        kinds[k], w);
                ASSERT_TRUE(!"a diagram names a word the code does not have");
            }
            (*found)++;
        }
    }
}

/* The ```mermaid blocks of a file under the source tree, each checked; *blocks: how many. */
static void check_file(const char *rel, int *blocks)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", INBOXD_SOURCE_DIR, rel);
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    *blocks = 0;
    for (char *p = strstr(text, "```mermaid\n"); p; p = strstr(p, "```mermaid\n")) {
        char *end = strstr(p + 11, "\n```");
        ASSERT_TRUE(end != NULL);
        *end = '\0';
        int words = 0;
        check_words(rel, p, &words);
        if (words < 2)
            fprintf(stderr, "%s: diagram %d names %d checked words\n", rel, *blocks + 1, words);
        ASSERT_TRUE(words >= 2);
        (*blocks)++;
        p = end + 1;
    }
}

static void test_diagrams(void)
{
    int n = 0;
    check_file("README.md", &n);
    ASSERT_EQ(n, 1);
    check_file("docs/ARCHITECTURE.md", &n);
    ASSERT_EQ(n, 2);
}

/* The checker itself refuses a word that is not in the tables. */
static void test_checker_refuses(void)
{
    ASSERT_TRUE(is_reason("HandlerError"));
    ASSERT_TRUE(!is_reason("HandlerErrors"));
    ASSERT_TRUE(is_result("applied"));
    ASSERT_TRUE(!is_result("done"));
    ASSERT_TRUE(is_row_state("uncertain"));
    ASSERT_TRUE(!is_row_state("pending"));
    ASSERT_TRUE(is_outbox_state("pending"));
    ASSERT_TRUE(!is_outbox_state("processed"));
}

int main(void)
{
    RUN(test_checker_refuses);
    RUN(test_diagrams);
    return ib_test_done();
}
