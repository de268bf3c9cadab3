// canvas.h — a grid of character cells the dashboard draws into before the terminal sees it.
//
// Defines: Color, Cell, Canvas, canvas_init(), canvas_free(), canvas_clear(), canvas_put(),
//          canvas_text(), canvas_printf(), canvas_fill(), canvas_to_text(), Braille,
//          braille_init(), braille_free(), braille_dot(), braille_line(), braille_draw().
//
// Drawing into a plain grid first keeps the dashboard testable without a terminal (the
// grid can be printed as text: `shardlab tui --dump`), and lets tui.c hand the terminal
// only whole frames. A cell holds one Unicode code point of width 1, a colour and an
// attribute; colours are named by what they show, and tui.c maps them to the terminal's.
#ifndef SHARDLAB_CANVAS_H
#define SHARDLAB_CANVAS_H

#include <stdint.h>

#include "common/runfiles/json.h"

typedef enum {
    COLOR_NONE,                                             // the terminal's own
    COLOR_TITLE, COLOR_DIM, COLOR_OK, COLOR_BAD, COLOR_WARN,
    COLOR_LOSS, COLOR_FLOOR, COLOR_REF,                     // the loss chart
    COLOR_FWD, COLOR_BWD, COLOR_RECOMPUTE, COLOR_OPTIM,     // the timeline's compute
    COLOR_ALL_REDUCE, COLOR_SHARD, COLOR_P2P, COLOR_COLL,   // and its communication,
    COLOR_ACROSS,                                           // across replicas (timeline.c)
    COLOR_MEM0,                                             // memory categories: MEM0 + k
    COLOR_COUNT = COLOR_MEM0 + 8
} Color;

enum { ATTR_BOLD = 1, ATTR_REVERSE = 2 };

typedef struct {
    uint32_t ch;      // a code point of width 1
    uint8_t color, attr;
} Cell;

typedef struct {
    int w, h;
    Cell *cells;
} Canvas;

void canvas_init(Canvas *c, int w, int h);
void canvas_free(Canvas *c);
void canvas_clear(Canvas *c);
// Out-of-range cells are ignored, so callers can draw without clipping by hand.
void canvas_put(Canvas *c, int x, int y, uint32_t ch, int color, int attr);
// UTF-8 text from column x, at most maxw columns (maxw < 0: to the edge). Returns the
// columns used. Invalid UTF-8 shows as '?'.
int canvas_text(Canvas *c, int x, int y, int maxw, int color, int attr, const char *utf8);
int canvas_printf(Canvas *c, int x, int y, int maxw, int color, int attr, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
void canvas_fill(Canvas *c, int x, int y, int w, uint32_t ch, int color, int attr);
// The grid as UTF-8 lines (trailing spaces dropped), appended to sb.
void canvas_to_text(const Canvas *c, StrBuf *sb);

// A braille plot: every cell is 2 x 4 dots, so a w x h area has 2w x 4h of resolution.
// Each dot remembers the colour that set it; a cell shows the lowest-numbered colour among
// its dots, so the loss curve (COLOR_LOSS) stays on top of the floor and the reference.
typedef struct {
    int w, h;            // in cells
    uint8_t *dots;       // [4h][2w]: 0 = empty, else colour + 1
} Braille;

void braille_init(Braille *b, int w, int h);
void braille_free(Braille *b);
void braille_dot(Braille *b, int x, int y, int color);
void braille_line(Braille *b, int x0, int y0, int x1, int y1, int color);
// Into the canvas at (x, y). Without UTF-8 a cell is one character for its colour: '*' for
// the loss, '-' for the floor, '+' for the reference.
void braille_draw(const Braille *b, Canvas *c, int x, int y, int utf8);

#endif
