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

SpanTime span_time(const RunSpans *sp) {
    Interval *comp = malloc_check(sp->n * sizeof *comp + 1), *comm = malloc_check(sp->n * sizeof *comm + 1),
             *all = malloc_check(sp->n * sizeof *all + 1);
    size_t nc = 0, nm = 0, na = 0;
    for (size_t i = 0; i < sp->n; i++) {
        Interval iv = {sp->items[i].t0_us, sp->items[i].t1_us};
        if (span_is_compute(sp->items[i].name)) comp[nc++] = iv;
        else comm[nm++] = iv;
        all[na++] = iv;
    }
    nc = merge(comp, nc), nm = merge(comm, nm), na = merge(all, na);
    SpanTime t = {length(comp, nc), length(comm, nm), 0, length(all, na), 0};
    t.hidden_us = t.comm_us > 0 ? overlap(comp, nc, comm, nm) : 0;
    if (nm > 0) {  // comm[0] is the earliest communication once merged
        Interval after = {comm[0].a, INT64_MAX};
        t.window_us = overlap(comp, nc, &after, 1);
    }
    free(comp), free(comm), free(all);
    return t;
}
