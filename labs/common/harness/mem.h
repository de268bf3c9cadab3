// mem.h — the device-memory allocator that counts every byte by category.
//
// Every tensor buffer a rank holds — weights, gradients, optimizer state, saved
// activations, communication buffers — comes from mem_alloc() with a category, so the
// "mem" numbers in the run log are measured, not estimated. On the CPU a rank's "device
// memory" is ordinary heap memory; on CUDA it is cudaMalloc'd (device.h); the accounting is
// the same either way. (On a GPU, memory outside these tensors — the CUDA context, cuBLAS's
// and the attention kernels' workspace — shows only in the device's own figure, which the
// start and end events report beside these.)
//
// Categories (the "mem" object of a step event):
//   params  the model weights this rank holds
//   grads   their gradients
//   optim   optimizer state (AdamW: first and second moments, 8 bytes per parameter)
//   acts    activations saved for the backward pass, plus transient workspace while it is
//           allocated (so it shows in peak, not in the steady figure after a step)
//   comm    buffers used only by collectives
// peak is the high-water mark of the total, transient buffers included; mem_peak_in() gives
// each category's own.
//
// Freed buffers on a GPU are kept for reuse. A pass allocates its workspace and frees it
// again, every micro-batch of every step; on a GPU that was a cudaMalloc and a cudaFree each
// time, and cudaFree waits for the whole device. So a Mem on a GPU keeps what mem_free
// gives back and hands it out again to the next request of exactly the same size (zeroed on
// the device's stream, as new memory is). The counts do not change: a kept buffer is not in
// use and counts nowhere; it is what the device holds beyond in_use, and never more than the
// peak already counted. When the device runs out, the kept buffers are released and the
// allocation is tried again. On the CPU freed memory goes back to the heap at once (so the
// sanitizers see every use after free).
#ifndef SHARDLAB_MEM_H
#define SHARDLAB_MEM_H

#include <stddef.h>

#include "common/model/device.h"

typedef enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIM, MEM_ACTS, MEM_COMM, MEM_CATEGORIES } MemCategory;

const char *mem_category_name(MemCategory c);

typedef struct {
    void *ptr;
    size_t bytes;
    MemCategory category;
    const char *what;  // a static string naming the buffer, for error messages
} MemBlock;

typedef struct {
    size_t in_use[MEM_CATEGORIES];
    size_t peak;
    size_t peak_in[MEM_CATEGORIES];  // each category's own high-water mark
    MemBlock *blocks;  // live allocations (few: tens per rank), so a linear table is enough
    size_t nblocks, cap;
    MemBlock *kept;    // freed buffers kept for reuse (keep_freed), by size
    size_t nkept, kept_cap;
    int keep_freed;    // set on a GPU (see above)
    const Device *dev; // where the buffers live
} Mem;

// Buffers on dev (NULL: the CPU). dev must outlive m.
void mem_init(Mem *m, const Device *dev);
// Frees every buffer still allocated.
void mem_destroy(Mem *m);
// 64-byte aligned, zero-filled. Dies with a message naming `what` if memory runs out.
void *mem_alloc(Mem *m, MemCategory c, size_t bytes, const char *what);
float *mem_alloc_floats(Mem *m, MemCategory c, size_t count, const char *what);
// ptr must come from mem_alloc on the same Mem (dies otherwise); NULL is ignored.
void mem_free(Mem *m, void *ptr);
// mem_free() on each of n buffers (NULL ones too: nothing), then free() on the array.
void mem_free_array(Mem *m, float **bufs, int n);

size_t mem_in_use(const Mem *m, MemCategory c);
size_t mem_total(const Mem *m);
size_t mem_peak(const Mem *m);
// The high-water mark of one category alone (e.g. how many gathered weights were held at once).
size_t mem_peak_in(const Mem *m, MemCategory c);
// Start new high-water marks (the total's and each category's) from what is allocated now.
void mem_reset_peak(Mem *m);
// Keep freed buffers for reuse (on = 1; mem_init sets it on a GPU) or release them (0).
void mem_keep_freed(Mem *m, int on);

// "1.23 MiB"-style text for a byte count (B, KiB, MiB, GiB, TiB: powers of 1024) in buf; returns buf.
const char *format_bytes(char *buf, size_t n, double bytes);

#endif
