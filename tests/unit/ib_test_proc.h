/*
 * ib_test_proc.h - a helper process for tests: a small server (a Node script)
 * started with its stdin and stdout on pipes; it prints the port it listens
 * on as its first line and exits when its stdin closes. Called from the
 * test's main thread only.
 */
#ifndef IB_TEST_PROC_H
#define IB_TEST_PROC_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int stdin_fd;
} ib_test_proc_t;

/* Runs argv (argv[0] looked up on PATH); returns the port it printed, or -1. */
static inline int ib_test_proc_start(ib_test_proc_t *p, char *const argv[])
{
    int in[2], out[2];
    char line[32] = "";
    if (pipe(in) != 0 || pipe(out) != 0)
        return -1;
    p->pid = fork();
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->stdin_fd = in[1];
    FILE *f = fdopen(out[0], "r");
    if (!f || !fgets(line, sizeof line, f)) {
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    int port = atoi(line);
    return port > 0 ? port : -1;
}

/* Closes its stdin, ends it and waits for it; safe to call twice. */
static inline void ib_test_proc_stop(ib_test_proc_t *p)
{
    if (p->stdin_fd >= 0)
        close(p->stdin_fd);
    if (p->pid > 0) {
        kill(p->pid, SIGTERM);
        waitpid(p->pid, NULL, 0);
    }
    p->stdin_fd = -1;
    p->pid = 0;
}

#endif
