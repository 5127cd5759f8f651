/* The library is never unloaded: a copy opened with dlopen (not preloaded)
 * stays mapped after dlclose (-z nodelete), so that the fork handlers it
 * registered at start-up, and its helper thread's code, stay valid. It links
 * without gcc's start files, whose __cxa_finalize call would have dropped
 * those handlers at the unload (Makefile). The test runs itself again
 * without LD_PRELOAD; that child opens the library under test, allocates
 * and frees through it, closes it, finds it still loaded (RTLD_NOLOAD), and
 * forks, which runs the library's handlers: an unmapped handler would kill
 * the child with SIGSEGV. */
#include <sys/wait.h>

#include "common.h"

extern char **environ;

static int opened_and_closed(const char *lib) {
    void *handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECKF(handle != NULL, "dlopen(%s): %s", lib, dlerror());
    void *(*lib_malloc)(size_t);
    void (*lib_free)(void *);
    void *sym = dlsym(handle, "malloc");
    CHECK(sym != NULL);
    memcpy(&lib_malloc, &sym, sizeof sym);
    sym = dlsym(handle, "free");
    CHECK(sym != NULL);
    memcpy(&lib_free, &sym, sizeof sym);
    for (int i = 0; i < 1000; i++) {
        char *p = lib_malloc((size_t)(16 + i * 64));
        CHECK(p != NULL);
        p[0] = 1;
        lib_free(p);
    }
    CHECKF(dlclose(handle) == 0, "dlclose: %s", dlerror());
    CHECKF(dlopen(lib, RTLD_NOW | RTLD_NOLOAD) != NULL, "%s was unloaded by dlclose", lib);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child status %#x", status);
    return 0;
}

int main(int argc, char **argv) {
    const char *lib = getenv("TEST_PRELOAD_LIB");
    if (argc > 1 && strcmp(argv[1], "child") == 0) return opened_and_closed(lib);
    if (!tm_expected() || lib == NULL || lib[0] == '\0')
        SKIP("not tidemalloc: another allocator may be unloaded");
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        unsetenv("LD_PRELOAD");
        char *child_argv[] = {argv[0], "child", NULL};
        execve(argv[0], child_argv, environ);
        _exit(127);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x (signal %d)", status,
           WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return 0;
}
