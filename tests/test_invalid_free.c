/* Invalid frees abort with a one-line message naming the function: a child
 * process does one bad free each, and must die of SIGABRT having written a
 * line containing "free(): " on stderr. Cases: double free of a small block,
 * free of a stack address, free of a pointer into the middle of a block, free
 * of a static variable's address. (glibc catches only some of these.) */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "common.h"

/* The compiler must not see the bad frees coming (it would warn). */
static void *volatile launder_slot;
static void *launder(void *p)
{
    launder_slot = p;
    return launder_slot;
}

static _Alignas(64) char static_area[256];

static void case_double_free(void)
{
    void *p = malloc(32);
    memset(p, 0, 32);
    free(p);
    free(launder(p));
}

static void case_stack(void)
{
    _Alignas(64) char buf[256];
    memset(buf, 0, sizeof buf);
    free(launder(buf + 64));
}

static void case_middle(void)
{
    char *p = malloc(200);
    memset(p, 0, 200);
    free(launder(p + 64));
}

static void case_static(void)
{
    memset(static_area, 0, sizeof static_area);
    free(launder(static_area + 64));
}

static const struct {
    const char *name;
    void (*run)(void);
} cases[] = {
    {"double free of a small block", case_double_free},
    {"free of a stack address", case_stack},
    {"free of a pointer into a block", case_middle},
    {"free of a static variable", case_static},
};

int main(void)
{
    int failures = 0;
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int c = 0; c < ncases; c++) {
        int pipefd[2];
        CHECK(pipe(pipefd) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            struct rlimit no_core = {0, 0};
            setrlimit(RLIMIT_CORE, &no_core);
            dup2(pipefd[1], 2);
            close(pipefd[0]);
            close(pipefd[1]);
            /* a little allocator traffic first, so that it is initialised */
            void *warm[8];
            for (int i = 0; i < 8; i++)
                warm[i] = malloc((size_t)(i + 1) * 24);
            for (int i = 0; i < 8; i++)
                free(warm[i]);
            cases[c].run();
            _exit(0); /* survived the bad free */
        }
        close(pipefd[1]);
        char msg[4096];
        size_t len = 0;
        ssize_t r;
        while (len < sizeof msg - 1 && (r = read(pipefd[0], msg + len, sizeof msg - 1 - len)) > 0)
            len += (size_t)r;
        msg[len] = 0;
        close(pipefd[0]);
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        char *nl = strchr(msg, '\n');
        if (nl)
            *nl = 0;
        int aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
        int named = strstr(msg, "free(): ") != NULL;
        if (!aborted || !named) {
            failures++;
            fprintf(stderr, "[%s: %s %d, stderr \"%s\"] ", cases[c].name,
                    WIFSIGNALED(status) ? "signal" : "exit",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), msg);
        }
    }
    if (failures) {
        fprintf(stderr, "%d of %d invalid frees not caught as required\n", failures, ncases);
        return 1;
    }
    return 0;
}
