// canvas.c — see canvas.h.
#include "canvas.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"

void canvas_init(Canvas *c, int w, int h) {
    c->w = w > 0 ? w : 1, c->h = h > 0 ? h : 1;
    c->cells = calloc_check((size_t)c->w * (size_t)c->h, sizeof *c->cells);
    canvas_clear(c);
}

void canvas_free(Canvas *c) {
    free(c->cells);
    c->cells = NULL, c->w = c->h = 0;
}

void canvas_clear(Canvas *c) {
    for (int i = 0; i < c->w * c->h; i++) c->cells[i] = (Cell){' ', COLOR_NONE, 0};
}

void canvas_put(Canvas *c, int x, int y, uint32_t ch, int color, int attr) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    c->cells[y * c->w + x] = (Cell){ch, (uint8_t)color, (uint8_t)attr};
}

// The next code point of s (advancing it), or '?' for a byte that does not start valid UTF-8.
static uint32_t next_utf8(const unsigned char **s) {
    const unsigned char *p = *s;
    int n = p[0] < 0x80 ? 0 : (p[0] & 0xe0) == 0xc0 ? 1 : (p[0] & 0xf0) == 0xe0 ? 2 : (p[0] & 0xf8) == 0xf0 ? 3 : -1;
    uint32_t cp = n == 0 ? p[0] : n == 1 ? p[0] & 0x1fu : n == 2 ? p[0] & 0x0fu : p[0] & 0x07u;
    for (int i = 1; n > 0 && i <= n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            n = -1;
            break;
        }
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if (n < 0) {
        *s = p + 1;
        return '?';
    }
    *s = p + n + 1;
    return cp < 0x20 || cp == 0x7f ? '?' : cp;  // control characters would move the cursor
}

// Where text of n characters that does not fit in maxw columns is cut: before the last
// clause that fits (", ", two spaces or " · " start the next one; a clause that starts the
// text and does not fit is left out whole), else before its last word, so that a narrow
// terminal drops whole figures ("peak 5.70 MiB", "loss 4.7928") instead of halving one
// ("peak 5.70 Mi"); where not even half of it would show ("6 checks" in 7 columns), none of
// it. One long word (a path): cut at maxw.
static int cut_at(const uint32_t *cp, int n, int maxw) {
    if (n <= maxw) return n;
    int clause = -1, word = 0;
    for (int i = 0; i <= maxw && i + 1 < n; i++) {
        if (i > 0 && cp[i] == ' ' && cp[i - 1] != ' ') word = i;
        if ((cp[i] == ',' && cp[i + 1] == ' ') || (cp[i] == ' ' && (cp[i + 1] == ' ' || cp[i + 1] == 0xB7))) clause = i;
    }
    int cut = clause == 0 || clause >= maxw / 2 ? clause : word >= maxw / 2 ? word : word > 0 ? 0 : maxw;
    while (cut > 0 && cp[cut - 1] == ' ') cut--;
    return cut;
}

int canvas_text(Canvas *c, int x, int y, int maxw, int color, int attr, const char *utf8) {
    const unsigned char *s = (const unsigned char *)utf8;
    if (maxw < 0) maxw = c->w - x;
    if (maxw <= 0) return 0;
    uint32_t cp[1024];
    int n = 0;
    while (*s && n < (int)(sizeof cp / sizeof cp[0])) cp[n++] = next_utf8(&s);
    int used = cut_at(cp, n, maxw);
    for (int i = 0; i < used; i++) canvas_put(c, x + i, y, cp[i], color, attr);
    return used;
}

int canvas_printf(Canvas *c, int x, int y, int maxw, int color, int attr, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return canvas_text(c, x, y, maxw, color, attr, text);
}

void canvas_fill(Canvas *c, int x, int y, int w, uint32_t ch, int color, int attr) {
    for (int i = 0; i < w; i++) canvas_put(c, x + i, y, ch, color, attr);
}

static void put_utf8(StrBuf *sb, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) b[0] = (char)cp, n = 1;
    else if (cp < 0x800) b[0] = (char)(0xc0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
    else if (cp < 0x10000)
        b[0] = (char)(0xe0 | cp >> 12), b[1] = (char)(0x80 | (cp >> 6 & 0x3f)), b[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
    else
        b[0] = (char)(0xf0 | cp >> 18), b[1] = (char)(0x80 | (cp >> 12 & 0x3f)), b[2] = (char)(0x80 | (cp >> 6 & 0x3f)),
        b[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
    sb_append(sb, b, n);
}

void canvas_to_text(const Canvas *c, StrBuf *sb) {
    for (int y = 0; y < c->h; y++) {
        int end = c->w;
        while (end > 0 && c->cells[y * c->w + end - 1].ch == ' ') end--;
        for (int x = 0; x < end; x++) put_utf8(sb, c->cells[y * c->w + x].ch);
        sb_append(sb, "\n", 1);
    }
}

// ---------------------------------------------------------------------------------------
// Braille
// ---------------------------------------------------------------------------------------
// A braille character is U+2800 plus one bit per dot. The dots of a cell, as (column, row):
//     (0,0) 0x01   (1,0) 0x08
//     (0,1) 0x02   (1,1) 0x10
//     (0,2) 0x04   (1,2) 0x20
//     (0,3) 0x40   (1,3) 0x80
static const uint8_t BRAILLE_BIT[4][2] = {{0x01, 0x08}, {0x02, 0x10}, {0x04, 0x20}, {0x40, 0x80}};

void braille_init(Braille *b, int w, int h) {
    b->w = w > 0 ? w : 1, b->h = h > 0 ? h : 1;
    b->dots = calloc_check((size_t)b->w * 2 * (size_t)b->h * 4, 1);
}

void braille_free(Braille *b) {
    free(b->dots);
    b->dots = NULL;
}

void braille_dot(Braille *b, int x, int y, int color) {
    if (x < 0 || y < 0 || x >= 2 * b->w || y >= 4 * b->h) return;
    uint8_t *d = &b->dots[(size_t)y * 2 * (size_t)b->w + (size_t)x];
    if (*d == 0 || color + 1 < *d) *d = (uint8_t)(color + 1);
}

// Bresenham: every dot between the two ends, so a steep drop stays a connected line.
void braille_line(Braille *b, int x0, int y0, int x1, int y1, int color) {
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1, dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1, e = dx + dy;
    for (int guard = 0; guard < 1 << 20; guard++) {
        braille_dot(b, x0, y0, color);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * e;
        if (e2 >= dy) e += dy, x0 += sx;
        if (e2 <= dx) e += dx, y0 += sy;
    }
}

void braille_draw(const Braille *b, Canvas *c, int x, int y, int utf8) {
    for (int cy = 0; cy < b->h; cy++)
        for (int cx = 0; cx < b->w; cx++) {
            int bits = 0, top = 0;
            for (int r = 0; r < 4; r++)
                for (int k = 0; k < 2; k++) {
                    uint8_t d = b->dots[(size_t)(4 * cy + r) * 2 * (size_t)b->w + (size_t)(2 * cx + k)];
                    if (!d) continue;
                    bits |= BRAILLE_BIT[r][k];
                    if (!top || d < top) top = d;
                }
            if (!bits) continue;
            int color = top - 1;
            uint32_t ch = utf8 ? 0x2800u + (uint32_t)bits : color == COLOR_FLOOR ? '-' : color == COLOR_REF ? '+' : '*';
            canvas_put(c, x + cx, y + cy, ch, color, 0);
        }
}
