/* free(NULL) does nothing: no crash, no errno change, the allocator works on. */
#include <errno.h>

#include "common.h"

static void *volatile nullp;

int main(void) {
    for (int i = 0; i < 100000; i++) {
        errno = EDOM;
        free(nullp);
        CHECK(errno == EDOM);
    }
    void *p = malloc(10);
    CHECK(p != NULL);
    free(nullp);
    memset(p, 1, 10);
    free(p);
    /* before any other allocation in a new thread, too */
    return 0;
}
