/*
 * inboxd - consume a Service Bus entity in peek-lock mode and apply each
 * message to SQL through a transactional inbox, exactly once in effect.
 *
 * Exit status: 0 success or clean drain, 1 runtime failure, 2 invalid
 * configuration or usage.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "sb_log.h"
#include "wk_config.h"
#include "wk_daemon.h"
#include "wk_limits.h"
#include "wk_outbox.h"
#include "rt_keys.h"
#include "rt_route.h"

#define EXIT_CONFIG 2

static int usage(const char *why)
{
    fprintf(stderr, "inboxd: %s\nTry 'inboxd --help'.\n", why);
    return EXIT_CONFIG;
}

/*
 * Loads and checks the config and its routes; findings go to out. With live
 * (--check-config) and no problem found, the settings are also held against
 * the entity's description and the database's connection limit. Returns the
 * problems.
 */
static int check_all(wk_config_t *cfg, const char *path, bool relay_only, bool live, FILE *out)
{
    int problems = wk_config_load(cfg, path, out);
    rt_routes_t routes = {0};
    wk_outbox_plan_t plan = {0};
    bool compiled = false;
    if (!relay_only)
        problems += wk_config_check_entity(cfg, out);
    if (cfg->routes) {
        int route_problems = rt_routes_compile(cfg->routes, &routes, out);
        compiled = true;
        problems += route_problems;
        problems += rt_routes_check_limits(&routes, cfg->servicebus.max_auto_lock_renewal_s, out);
        rt_routes_warn(&routes, out);
        if (!route_problems)
            problems += wk_outbox_plan(cfg, &routes, relay_only, &plan, out);
    }
    if (live && !problems) {
        wk_config_transport_apply(cfg);
        wk_limits_check_servers(cfg, compiled ? &routes : NULL, relay_only, plan.relay, out);
    }
    if (compiled)
        rt_routes_free(&routes);
    return problems;
}

/*
 * At start: with problems, every finding goes to stderr as text (inboxd then
 * exits 2); without, each "config: warning: ..." line is logged as a JSON
 * warning (event "config").
 */
static void report_findings(const char *found, int problems)
{
    const char *line = found;
    if (problems) {
        fputs(found ? found : "", stderr);
        return;
    }
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        char text[2048];
        snprintf(text, sizeof(text), "%.*s", (int)n, line);
        const char *msg = strncmp(text, "config: warning: ", 17) == 0 ? text + 17 : text;
        IB_LOG(IB_LOG_WARN, "config", IB_MSG(msg));
        line = end ? end + 1 : NULL;
    }
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    enum { RUN, CHECK, PRINT, MARKDOWN } mode = RUN;
    wk_config_t cfg;
    int problems, rc;
    bool relay_only = false;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            if (++i == argc)
                return usage("--config needs a path");
            path = argv[i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            path = argv[i] + 9;
        } else if (strcmp(argv[i], "--relay-only") == 0) {
            relay_only = true;
        } else if (strcmp(argv[i], "--check-config") == 0) {
            mode = CHECK;
        } else if (strcmp(argv[i], "--print-config") == 0) {
            mode = PRINT;
        } else if (strcmp(argv[i], "--config-reference") == 0) {
            mode = MARKDOWN;
        } else if (strcmp(argv[i], "--route-reference") == 0) {
            rt_keys_print_markdown(stdout);
            return 0;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            wk_config_print_help(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("inboxd %s\n", INBOXD_VERSION);
            return 0;
        } else {
            char why[256];
            snprintf(why, sizeof(why), "unknown argument '%s'", argv[i]);
            return usage(why);
        }
    }
    if (mode == MARKDOWN) {
        wk_config_print_markdown(stdout);
        return 0;
    }

    /* Running, the findings are held back: problems go to stderr as text
     * (exit 2), warnings become JSON log lines, like every line inboxd logs. */
    char *found = NULL;
    size_t found_len = 0;
    FILE *out = mode == RUN ? open_memstream(&found, &found_len) : NULL;
    if (!out)
        out = stderr;
    problems = check_all(&cfg, path, relay_only, mode == CHECK, out);
    if (out != stderr) {
        fclose(out);
        report_findings(found, problems);
        free(found);
    }
    if (mode == PRINT) {
        json_t *j = wk_config_to_json(&cfg);
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(j);
        wk_config_free(&cfg);
        return problems ? EXIT_CONFIG : 0;
    }
    /* A typo'd variable is silent otherwise: an error when checking, a warning at start. */
    if (mode == CHECK)
        problems += wk_config_unknown_env(stderr, true);
    if (problems) {
        fprintf(stderr, "inboxd: %d configuration problem%s\n", problems, problems == 1 ? "" : "s");
        wk_config_free(&cfg);
        return EXIT_CONFIG;
    }
    if (mode == CHECK) {
        wk_config_explain_budget(&cfg, stdout);
        printf("configuration ok\n");
        wk_config_free(&cfg);
        return 0;
    }
    ib_log_set_level((ib_log_level_t)ib_log_level_parse(cfg.log.level));
    /*
     * glibc gives the free top of each thread's heap back to the system past
     * 128 KiB, and libcurl's buffers of the next batch fault the pages in
     * again (a fifth of an HTTP worker's CPU went to it). Keep 1 MiB a heap;
     * the mmap threshold then stays at 128 KiB, so large messages are still
     * given back when freed.
     */
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
    sb_log_init();
    wk_config_unknown_env(NULL, false);
    rc = wk_daemon_run(&cfg, relay_only);
    wk_config_free(&cfg);
    return rc;
}
