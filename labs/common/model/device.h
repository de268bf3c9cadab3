// device.h — where a rank's tensors live and its kernels run: the CPU, or one CUDA GPU.
//
// --device auto|cpu|cuda picks it (auto: cuda when a GPU is usable, else cpu). On the CPU a
// rank is a process standing in for a GPU: its "device memory" is heap memory and its kernels
// are ops.c. On CUDA, ranks map to GPUs by LOCAL_RANK (rank r of a node uses GPU r mod the
// node's count); more ranks on a node than GPUs means ranks share GPUs, and the lab says so.
//
// Everything above this layer — the model (gpt.c), the optimizer step (train.c), the labs —
// is written once: it allocates through Mem (mem.h, which calls device_alloc), runs kernels
// through d->ops, and copies to the host only to look at a value (a loss, a hash, a file).
#ifndef SHARDLAB_DEVICE_H
#define SHARDLAB_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

typedef enum { DEVICE_CPU, DEVICE_CUDA } DeviceKind;

typedef struct {
    DeviceKind kind;
    const char *name;  // "cpu" or "cuda": the run log's "device"
    const Ops *ops;    // the kernels (ops_cpu, or cuda_ops())
    int ordinal;       // the GPU this rank uses; -1 on the CPU
    int gpus;          // GPUs visible to this process (0 on the CPU)
    int shared;        // ranks on this node share GPUs (more local ranks than GPUs)
    int tf32;          // --tf32: TF32 tensor-core matrix products (CUDA only)
    char desc[200];    // one line: "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" or the CPU
    char why_cpu[200]; // for auto on a machine without a usable GPU: the reason
} Device;

// The CPU as a device: what Mem uses when given no device.
extern const Device device_cpu;

// Resolve want ("auto", "cpu", "cuda") for the rank with this LOCAL_RANK on a node running
// local_world ranks. Returns 0, or -1 with the reason in err (e.g. --device cuda on a machine
// without a GPU: a usage error for the caller to report).
int device_open(Device *d, const char *want, int local_rank, int local_world, int tf32, char *err, size_t nerr);
void device_close(Device *d);

// Zero-filled; NULL when the device is out of memory.
void *device_alloc(const Device *d, size_t bytes);
void device_free(const Device *d, void *p);
void device_zero(const Device *d, void *p, size_t bytes);
// Copies between the device and the host; they return when dst holds the bytes.
void device_to_host(const Device *d, void *dst, const void *src, size_t bytes);
void device_from_host(const Device *d, void *dst, const void *src, size_t bytes);
// Wait for the device's queued work (before reading a clock).
void device_sync(const Device *d);
// Timing without waiting. A GPU runs behind the host's calls, so "when did this layer's work
// end" is known only later. device_mark() puts a mark in the device's queue (a CUDA event;
// on the CPU, which runs each call to its end, the wall clock now); device_mark_times()
// gives, for n marks, the wall-clock microseconds (since the epoch) at which the device
// reached each one, waiting for the last of them. A GPU keeps its last 4096 marks: read
// them before making that many more.
typedef struct {
    int64_t us;  // the host's wall clock when the mark was made (on a GPU: queued, not reached)
    int slot;    // the GPU's event; -1 on the CPU
} DeviceMark;
DeviceMark device_mark(const Device *d);
void device_mark_times(const Device *d, const DeviceMark *marks, int n, int64_t *us);
// The param_hash (hash.h) of n buffers of the device, in order, continuing from h: computed
// where the bytes are (on a GPU by a kernel; only the chunks' hashes come to the host).
uint64_t device_param_hash(const Device *d, int n, const void *const *bufs, const size_t *bytes, uint64_t h);
// The device's own memory figure (CUDA: cudaMemGetInfo). Returns 0, or -1 on the CPU.
int device_mem_info(const Device *d, size_t *free_bytes, size_t *total_bytes);
// A profiler's capture on or off from here (CUDA: cudaProfilerStart/Stop, after the queued
// work, so that Nsight Compute's --profile-from-start off sees exactly the kernels between);
// nothing on the CPU. The labs call it around SHARDLAB_PROFILE_STEP's step (lab.h).
void device_profile(const Device *d, int on);

#endif
