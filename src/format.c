/* Output without malloc: error messages and statistics go through write(2)
 * from small stack buffers. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

RARE void write_string(int fd, const char *s) {
    size_t length = text_length(s);
    while (length > 0) {
        ssize_t n = write(fd, s, length);
        if (n <= 0) return;
        s += n;
        length -= (size_t)n;
    }
}

/* One line naming the function and the problem, then abort, as glibc does. */
RARE void fatal_error(const char *message) {
    write_string(STDERR_FILENO, message);
    write_string(STDERR_FILENO, "\n");
    abort();
}

RARE void out_flush(struct out_buffer *out) {
    out->data[out->length] = '\0';
    write_string(out->fd, out->data);
    out->length = 0;
}

RARE void out_string(struct out_buffer *out, const char *s) {
    for (; *s; s++) {
        if (out->length + 1 >= sizeof out->data) out_flush(out);
        out->data[out->length++] = *s;
    }
}

/* Right-aligned in `width` columns (0: no padding), like printf's "%*u". */
RARE void out_unsigned_padded(struct out_buffer *out, uint64_t value, int width) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    char text[48];
    int length = 0;
    for (int i = n; i < width && length < 24; i++)
        text[length++] = ' ';
    while (n > 0)
        text[length++] = digits[--n];
    text[length] = '\0';
    out_string(out, text);
}

RARE void out_unsigned(struct out_buffer *out, uint64_t value) {
    out_unsigned_padded(out, value, 0);
}
