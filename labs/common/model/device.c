// device.c — see device.h: choosing the device, and memory on it.
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/cuda/gpu.h"
#include "common/harness/check.h"
#include "common/harness/hash.h"

const Device device_cpu = {.kind = DEVICE_CPU, .name = "cpu", .ops = &ops_cpu, .ordinal = -1, .desc = "cpu"};

int device_open(Device *d, const char *want, int local_rank, int local_world, int tf32, char *err, size_t nerr) {
    memset(d, 0, sizeof *d);
    d->ordinal = -1;
    d->tf32 = tf32;
    if (strcmp(want, "auto") != 0 && strcmp(want, "cpu") != 0 && strcmp(want, "cuda") != 0) {
        snprintf(err, nerr, "--device must be auto, cpu or cuda (got '%s')", want);
        return -1;
    }
    char why[160] = "";
    int gpus = strcmp(want, "cpu") == 0 ? 0 : cuda_device_count(why, sizeof why);
    if (gpus == 0) {
        if (strcmp(want, "cuda") == 0) {
            snprintf(err, nerr, "--device cuda: no usable GPU (%s); use --device cpu", why);
            return -1;
        }
        d->kind = DEVICE_CPU;
        d->name = "cpu";
        d->ops = &ops_cpu;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(d->desc, sizeof d->desc, "cpu (a process standing in for a GPU; %ld cores)", cores);
        if (strcmp(want, "auto") == 0) snprintf(d->why_cpu, sizeof d->why_cpu, "%s", why);
        return 0;
    }
    d->kind = DEVICE_CUDA;
    d->name = "cuda";
    d->gpus = gpus;
    d->ordinal = local_rank % gpus;  // rank r of a node on GPU r, round robin when they share
    d->shared = local_world > gpus;
    if (cuda_open(d->ordinal, tf32, d->desc, sizeof d->desc, err, nerr) != 0) return -1;
    d->ops = cuda_ops();
    return 0;
}

void device_close(Device *d) {
    if (d->kind == DEVICE_CUDA) cuda_close();
    memset(d, 0, sizeof *d);
}

void *device_alloc(const Device *d, size_t bytes) {
    if (d->kind == DEVICE_CUDA) return cuda_alloc(bytes);
    // 64-byte aligned (aligned_alloc wants a multiple of the alignment), zero-filled.
    size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
    void *p = aligned_alloc(64, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

void device_free(const Device *d, void *p) {
    if (d->kind == DEVICE_CUDA) cuda_free(p);
    else free(p);
}

void device_zero(const Device *d, void *p, size_t bytes) {
    if (d->kind == DEVICE_CUDA) cuda_memset0(p, bytes);
    else memset(p, 0, bytes);
}

void device_to_host(const Device *d, void *dst, const void *src, size_t bytes) {
    if (d->kind == DEVICE_CUDA) cuda_copy(dst, src, bytes);
    else memmove(dst, src, bytes);
}

void device_from_host(const Device *d, void *dst, const void *src, size_t bytes) {
    if (d->kind == DEVICE_CUDA) cuda_copy(dst, src, bytes);
    else memmove(dst, src, bytes);
}

void device_sync(const Device *d) {
    if (d->kind == DEVICE_CUDA) cuda_sync();
}

void device_profile(const Device *d, int on) {
    if (d->kind == DEVICE_CUDA) cuda_profile(on);
}

uint64_t device_param_hash(const Device *d, int n, const void *const *bufs, const size_t *bytes, uint64_t h) {
    if (d->kind == DEVICE_CUDA) return cuda_param_hash(n, bufs, bytes, h);
    for (int i = 0; i < n; i++) h = param_hash_bytes(bufs[i], bytes[i], h);
    return h;
}

static int64_t wall_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

DeviceMark device_mark(const Device *d) {
    DeviceMark m = {wall_us(), -1};
    if (d->kind == DEVICE_CUDA) m.slot = cuda_mark();
    return m;
}

void device_mark_times(const Device *d, const DeviceMark *marks, int n, int64_t *us) {
    if (d->kind != DEVICE_CUDA || n == 0) {
        for (int i = 0; i < n; i++) us[i] = marks[i].us;
        return;
    }
    int *slots = malloc_check((size_t)n * sizeof *slots);
    for (int i = 0; i < n; i++) slots[i] = marks[i].slot;
    cuda_mark_times(slots, n, us);
    free(slots);
}

int device_mem_info(const Device *d, size_t *free_bytes, size_t *total_bytes) {
    if (d->kind != DEVICE_CUDA) return -1;
    return cuda_mem_info(free_bytes, total_bytes);
}
