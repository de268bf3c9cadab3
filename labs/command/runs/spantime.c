// spantime.c — see spantime.h.
#include "spantime.h"

#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"

typedef struct {
    int64_t a, b;
} Interval;

int span_is_compute(const char *name) {
    return !strcmp(name, "fwd") || !strcmp(name, "bwd") || !strcmp(name, "recompute") || !strcmp(name, "optim");
}

static int by_start(const void *x, const void *y) {
    const Interval *p = x, *q = y;
    return (p->a > q->a) - (p->a < q->a);
}

// Sorts and merges in place; returns the number of disjoint intervals left.
static size_t merge(Interval *iv, size_t n) {
    if (n == 0) return 0;
    qsort(iv, n, sizeof *iv, by_start);
    size_t k = 0;
    for (size_t i = 1; i < n; i++) {
        if (iv[i].a <= iv[k].b) {
            if (iv[i].b > iv[k].b) iv[k].b = iv[i].b;
        } else {
            iv[++k] = iv[i];
        }
    }
    return k + 1;
}

static int64_t length(const Interval *iv, size_t n) {
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += iv[i].b - iv[i].a;
    return sum;
}

// The total length of the intersection of two merged lists.
static int64_t overlap(const Interval *x, size_t nx, const Interval *y, size_t ny) {
    int64_t sum = 0;
    for (size_t i = 0, j = 0; i < nx && j < ny;) {
        int64_t a = x[i].a > y[j].a ? x[i].a : y[j].a, b = x[i].b < y[j].b ? x[i].b : y[j].b;
        if (b > a) sum += b - a;
        if (x[i].b < y[j].b) i++;
        else j++;
    }
    return sum;
}

// x less y (both merged) into out, which has room for nx + ny intervals; returns its count.
static size_t subtract(const Interval *x, size_t nx, const Interval *y, size_t ny, Interval *out) {
    size_t k = 0, j = 0;
    for (size_t i = 0; i < nx; i++) {
        int64_t a = x[i].a;
        while (j < ny && y[j].b <= a) j++;
        for (size_t m = j; m < ny && y[m].a < x[i].b; m++) {
            if (y[m].a > a) out[k++] = (Interval){a, y[m].a};
            if (y[m].b > a) a = y[m].b;
        }
        if (a < x[i].b) out[k++] = (Interval){a, x[i].b};
    }
    return k;
}

SpanTime span_time(const RunSpans *sp) {
    size_t room = 2 * sp->n + 1;
    Interval *comp = malloc_check(room * sizeof *comp), *comm = malloc_check(room * sizeof *comm),
             *all = malloc_check(room * sizeof *all), *wait = malloc_check(room * sizeof *wait),
             *work = malloc_check(room * sizeof *work);
    size_t nc = 0, nm = 0, na = 0, nw = 0;
    for (size_t i = 0; i < sp->n; i++) {
        const RunSpan *s = &sp->items[i];
        Interval iv = {s->t0_us, s->t1_us};
        if (span_is_compute(s->name)) comp[nc++] = iv;
        else comm[nm++] = iv;
        if (!span_is_compute(s->name) && s->waited_from_us > 0 && s->waited_from_us < s->t1_us)
            wait[nw++] = (Interval){s->waited_from_us, s->t1_us};
        all[na++] = iv;
    }
    nc = merge(comp, nc), nm = merge(comm, nm), na = merge(all, na), nw = merge(wait, nw);
    // The rank computed in its compute spans except while it waited inside them.
    size_t nk = subtract(comp, nc, wait, nw, work);
    SpanTime t = {length(work, nk), length(comm, nm), 0, length(all, na), length(wait, nw), 0};
    t.hidden_us = t.comm_us > 0 ? overlap(work, nk, comm, nm) : 0;
    if (nm > 0) {  // comm[0] is the earliest communication once merged
        Interval after = {comm[0].a, INT64_MAX};
        t.window_us = overlap(work, nk, &after, 1);
    }
    free(comp), free(comm), free(all), free(wait), free(work);
    return t;
}
