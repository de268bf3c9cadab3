// mem.c — see mem.h.
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *const category_names[MEM_CATEGORIES] = {"params", "grads", "optim", "acts",
                                                           "comm"};

const char *mem_category_name(MemCategory c) {
    return (unsigned)c < MEM_CATEGORIES ? category_names[c] : "?";
}

void mem_init(Mem *m, const Device *dev) {
    memset(m, 0, sizeof *m);
    m->dev = dev ? dev : &device_cpu;
    m->keep_freed = m->dev->kind == DEVICE_CUDA;
}

// Give every kept buffer back to the device.
static void release_kept(Mem *m) {
    for (size_t i = 0; i < m->nkept; i++) device_free(m->dev, m->kept[i].ptr);
    m->nkept = 0;
}

void mem_keep_freed(Mem *m, int on) {
    m->keep_freed = on;
    if (!on) release_kept(m);
}

void mem_destroy(Mem *m) {
    for (size_t i = 0; i < m->nblocks; i++) device_free(m->dev, m->blocks[i].ptr);
    release_kept(m);
    free(m->blocks);
    free(m->kept);
    memset(m, 0, sizeof *m);
}

// A kept buffer of exactly `bytes`, zeroed, taken out of the kept list; NULL if none.
static void *reuse_kept(Mem *m, size_t bytes) {
    for (size_t i = m->nkept; i-- > 0;)
        if (m->kept[i].bytes == bytes) {
            void *p = m->kept[i].ptr;
            m->kept[i] = m->kept[--m->nkept];
            device_zero(m->dev, p, bytes);
            return p;
        }
    return NULL;
}

void *mem_alloc(Mem *m, MemCategory c, size_t bytes, const char *what) {
    if ((unsigned)c >= MEM_CATEGORIES) die(NULL, "mem_alloc(%s): bad category %d", what, (int)c);
    void *p = m->nkept ? reuse_kept(m, bytes) : NULL;
    if (!p) p = device_alloc(m->dev, bytes);  // zero-filled; we count what was asked for
    if (!p && m->nkept) {  // the kept buffers may be what fills the device
        release_kept(m);
        p = device_alloc(m->dev, bytes);
    }
    if (!p)
        die("lower --batch, --seq, --dim or --layers", "out of %s memory allocating %zu bytes for %s (%s)",
            m->dev->name, bytes, what, category_names[c]);
    if (m->nblocks == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        MemBlock *grown = realloc(m->blocks, m->cap * sizeof *grown);
        if (!grown) die(NULL, "out of memory growing the allocation table");
        m->blocks = grown;
    }
    m->blocks[m->nblocks++] = (MemBlock){p, bytes, c, what};
    m->in_use[c] += bytes;
    if (m->in_use[c] > m->peak_in[c]) m->peak_in[c] = m->in_use[c];
    size_t total = mem_total(m);
    if (total > m->peak) m->peak = total;
    return p;
}

float *mem_alloc_floats(Mem *m, MemCategory c, size_t count, const char *what) {
    return mem_alloc(m, c, count * sizeof(float), what);
}

void mem_free(Mem *m, void *ptr) {
    if (!ptr) return;
    for (size_t i = m->nblocks; i-- > 0;) {  // newest first: transients are freed soonest
        if (m->blocks[i].ptr == ptr) {
            m->in_use[m->blocks[i].category] -= m->blocks[i].bytes;
            if (m->keep_freed) {
                if (m->nkept == m->kept_cap) {
                    m->kept_cap = m->kept_cap ? 2 * m->kept_cap : 16;
                    m->kept = realloc_check(m->kept, m->kept_cap * sizeof *m->kept);
                }
                m->kept[m->nkept++] = m->blocks[i];
            } else {
                device_free(m->dev, ptr);
            }
            m->blocks[i] = m->blocks[--m->nblocks];
            return;
        }
    }
    die("this is a bug in shardlab", "mem_free of a pointer mem_alloc did not return");
}

void mem_free_array(Mem *m, float **bufs, int n) {
    for (int i = 0; i < n; i++) mem_free(m, bufs[i]);
    free(bufs);
}

size_t mem_in_use(const Mem *m, MemCategory c) { return (unsigned)c < MEM_CATEGORIES ? m->in_use[c] : 0; }

size_t mem_total(const Mem *m) {
    size_t t = 0;
    for (int c = 0; c < MEM_CATEGORIES; c++) t += m->in_use[c];
    return t;
}

size_t mem_peak(const Mem *m) { return m->peak; }

size_t mem_peak_in(const Mem *m, MemCategory c) { return (unsigned)c < MEM_CATEGORIES ? m->peak_in[c] : 0; }

void mem_reset_peak(Mem *m) {
    m->peak = mem_total(m);
    for (int c = 0; c < MEM_CATEGORIES; c++) m->peak_in[c] = m->in_use[c];
}

const char *format_bytes(char *buf, size_t n, double bytes) {
    if (bytes >= 1024.0 * 1024 * 1024 * 1024) snprintf(buf, n, "%.2f TiB", bytes / (1024.0 * 1024 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024) snprintf(buf, n, "%.2f MiB", bytes / (1024.0 * 1024));
    else if (bytes >= 1024.0) snprintf(buf, n, "%.1f KiB", bytes / 1024.0);
    else snprintf(buf, n, "%.0f B", bytes);
    return buf;
}
