/* Output without malloc: error messages and statistics go through write(2)
 * from small stack buffers. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

RARE void write_string(int fd, const char *s) {
    size_t length = text_length(s);
    while (length > 0) {
        long n = raw_syscall6(SYS_write, fd, (long)s, (long)length, 0, 0, 0);
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

RARE size_t format_unsigned(char *text, uint64_t value) {
    char digits[24];
    size_t n = 0, length = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    while (n > 0)
        text[length++] = digits[--n];
    return length;
}

/* Right-aligned in `width` columns (0: no padding), like printf's "%*u". */
RARE void out_unsigned_padded(struct out_buffer *out, uint64_t value, int width) {
    char text[48];
    size_t digits = format_unsigned(text + 24, value), length = 0;
    for (size_t i = digits; (int)i < width && length < 24; i++)
        text[length++] = ' ';
    for (size_t i = 0; i < digits; i++)
        text[length++] = text[24 + i];
    text[length] = '\0';
    out_string(out, text);
}

RARE void out_unsigned(struct out_buffer *out, uint64_t value) {
    out_unsigned_padded(out, value, 0);
}
