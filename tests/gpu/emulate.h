// emulate.h — runs CUDA kernels written for flash_tc.cuh on the CPU, so that a machine with no
// GPU (CI) checks them: the same source, compiled by the host's C++ compiler.
//
// Defines: SHARDLAB_EMULATE, the CUDA words those kernels use (threadIdx, blockIdx, gridDim,
//          __syncthreads, __shfl_xor_sync, uint2, __global__ and the like), the tensor cores'
//          instructions they call (emu_mma_bf16, emu_mma_tf32, emu_tf32_round), emu_shared(),
//          and emu_launch().
//
// The model. A block's threads are real threads, one per CUDA thread, run one block at a time.
// __syncthreads() is a barrier over the block; a warp's shuffle and its matrix instruction are
// barriers over its 32 threads, around a shared slot per lane:
//
//     __shfl_xor_sync(v, m)   each lane puts v in its slot; wait; read slot[lane ^ m]; wait
//     mma.sync (c += a b)     each lane puts its fragments of A and B in its slots; wait; each
//                             lane rebuilds A and B from all 32 lanes' fragments, by the layout
//                             PTX's ISA documents for the instruction, and computes its own
//                             four floats of C; wait
//
// So a kernel that indexes its fragments wrongly, stages the wrong rows or masks the wrong
// keys computes something else here too. What this cannot show: speed; whether the hardware's
// layouts are the ones documented (test_cuda_ops, on a GPU, shows that); and a missing
// barrier reliably: the threads do run at once, but a race shows only if they happen to
// interleave so (a __syncthreads() taken out after the forward pass's transpose was not
// caught: the warps' 64 exchanges before V is read give every thread time to finish).
// Shared memory starts as all-ones bytes (a NaN in fp32, bf16 and TF32), so a read of a
// location no thread wrote spreads NaNs into the results. A barrier that some thread never
// reaches (a deadlock on a GPU) stops the program with a message after 60 seconds.
// Built with -std=c++20 (std::atomic's wait and notify).
#ifndef SHARDLAB_EMULATE_H
#define SHARDLAB_EMULATE_H

#include <algorithm>
#include <chrono>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#define SHARDLAB_EMULATE 1
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __align__(n)

using std::max;
using std::min;

static const unsigned FULL_MASK = 0xffffffffu;

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint2 {
    unsigned x, y;
};

// A reusable barrier for n threads: the last to arrive starts the next generation and wakes
// the others (a futex: std::atomic's wait and notify).
static std::atomic<unsigned long> emu_progress;  // barriers passed, for the watchdog

class EmuBarrier {
  public:
    explicit EmuBarrier(int n) : n_(n) {}
    void wait() {
        unsigned gen = gen_.load(std::memory_order_acquire);
        if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
            count_.store(0, std::memory_order_relaxed);
            gen_.fetch_add(1, std::memory_order_release);
            gen_.notify_all();
            emu_progress.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        while (gen_.load(std::memory_order_acquire) == gen) gen_.wait(gen, std::memory_order_acquire);
    }

  private:
    std::atomic<int> count_{0};
    std::atomic<unsigned> gen_{0};
    int n_;
};

// A barrier that some thread never reaches hangs its block: the watchdog stops the program
// with a message when no barrier has been passed for 60 seconds.
static void emu_watchdog() {
    static std::once_flag once;
    std::call_once(once, [] {
        std::thread([] {
            unsigned long seen = emu_progress.load();
            for (int idle = 0;; idle++) {
                std::this_thread::sleep_for(std::chrono::seconds(1));
                unsigned long now = emu_progress.load();
                if (now != seen) seen = now, idle = 0;
                if (idle >= 60) {
                    fprintf(stderr, "emulate.h: no barrier passed for 60 s: threads wait for others that never "
                                    "come (a deadlock on a GPU)\n");
                    abort();
                }
            }
        }).detach();
    });
}

// What a block's threads share: shared memory, the barriers, the warps' slots.
struct EmuBlock {
    enum { MAX_WARPS = 32 };
    std::vector<unsigned char> shared;
    EmuBarrier block;
    std::vector<EmuBarrier *> warp;
    // The warps' slots, two of each: a warp's k-th exchange (shuffle or matrix instruction)
    // uses set k % 2, so a lane may fill the next set while others still read this one, and
    // one barrier an exchange suffices (none can fill a set again before all have passed the
    // barrier that follows their reading it).
    float shfl[2][MAX_WARPS][32];
    uint32_t a[2][MAX_WARPS][32][4], b[2][MAX_WARPS][32][2];

    EmuBlock(int threads, size_t shared_bytes) : shared(shared_bytes + 16, 0xff), block(threads) {
        for (int w = 0; w < threads / 32; w++) warp.push_back(new EmuBarrier(32));
    }
    ~EmuBlock() {
        for (EmuBarrier *w : warp) delete w;
    }
};

static thread_local dim3 threadIdx, blockIdx;
static dim3 gridDim, blockDim;
static thread_local EmuBlock *emu_block;
static thread_local unsigned emu_exchanges;  // this thread's warp-level exchanges so far

static inline unsigned char *emu_shared() {
    uintptr_t p = (uintptr_t)emu_block->shared.data();
    return (unsigned char *)((p + 15) / 16 * 16);  // 16-byte aligned, as a GPU's
}

static inline void __syncthreads() { emu_block->block.wait(); }

static inline int emu_warp() { return (int)threadIdx.x / 32; }
static inline int emu_lane() { return (int)threadIdx.x % 32; }

static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    (void)mask;
    EmuBlock *blk = emu_block;
    int w = emu_warp(), l = emu_lane(), set = emu_exchanges++ % 2;
    blk->shfl[set][w][l] = v;
    blk->warp[w]->wait();
    return blk->shfl[set][w][l ^ lane_mask];
}

static inline float emu_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// Rounded to TF32 as cvt.rna.tf32.f32: to nearest, ties away from zero, 13 low bits cleared;
// infinities and NaNs as they are.
static inline uint32_t emu_tf32_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;
}

// A matrix instruction's exchange: each lane's fragments into its slots; when all 32 are in,
// the set every lane reads A and B from.
static inline int emu_deposit(const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    EmuBlock *blk = emu_block;
    int w = emu_warp(), l = emu_lane(), set = emu_exchanges++ % 2;
    memcpy(blk->a[set][w][l], a, sizeof a);
    memcpy(blk->b[set][w][l], b, sizeof b);
    blk->warp[w]->wait();
    return set;
}

// The lane's floats of C: rows g and g + 8, columns 2q and 2q + 1, plus A B in fp32.
template <int K>
static void emu_product(float (&c)[4], const float (&A)[16][K], const float (&B)[K][8]) {
    int g = emu_lane() / 4, q = emu_lane() % 4;
    for (int i = 0; i < 4; i++) {
        int row = i < 2 ? g : g + 8, col = 2 * q + i % 2;
        float sum = c[i];
        for (int k = 0; k < K; k++) sum += A[row][k] * B[k][col];
        c[i] = sum;
    }
}

// mma.sync.m16n8k16 .bf16: two elements a word, the lower index in the low half. Lane (g, q)
// holds A's rows g and g + 8 at columns 2q, 2q + 1 (a[0], a[1]) and 2q + 8, 2q + 9 (a[2],
// a[3]); B's column g at rows 2q, 2q + 1 (b[0]) and 2q + 8, 2q + 9 (b[1]).
static inline void emu_mma_bf16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    float A[16][16], B[16][8];
    int set = emu_deposit(a, b);
    for (int lane = 0; lane < 32; lane++) {
        const uint32_t *la = emu_block->a[set][emu_warp()][lane], *lb = emu_block->b[set][emu_warp()][lane];
        int g = lane / 4, q = lane % 4;
        const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * q, 2 * q, 2 * q + 8, 2 * q + 8};
        for (int i = 0; i < 4; i++) A[rows[i]][cols[i]] = emu_float(la[i] << 16), A[rows[i]][cols[i] + 1] = emu_float(la[i] & 0xffff0000u);
        B[2 * q][g] = emu_float(lb[0] << 16), B[2 * q + 1][g] = emu_float(lb[0] & 0xffff0000u);
        B[2 * q + 8][g] = emu_float(lb[1] << 16), B[2 * q + 9][g] = emu_float(lb[1] & 0xffff0000u);
    }
    emu_product<16>(c, A, B);
}

// mma.sync.m16n8k8 .tf32: one element a word, its 13 low bits ignored. Lane (g, q) holds A's
// rows g and g + 8 at column q (a[0], a[1]) and q + 4 (a[2], a[3]); B's column g at rows q
// (b[0]) and q + 4 (b[1]).
static inline void emu_mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    float A[16][8], B[8][8];
    int set = emu_deposit(a, b);
    for (int lane = 0; lane < 32; lane++) {
        const uint32_t *la = emu_block->a[set][emu_warp()][lane], *lb = emu_block->b[set][emu_warp()][lane];
        int g = lane / 4, q = lane % 4;
        A[g][q] = emu_float(la[0] & 0xffffe000u), A[g + 8][q] = emu_float(la[1] & 0xffffe000u);
        A[g][q + 4] = emu_float(la[2] & 0xffffe000u), A[g + 8][q + 4] = emu_float(la[3] & 0xffffe000u);
        B[q][g] = emu_float(lb[0] & 0xffffe000u), B[q + 4][g] = emu_float(lb[1] & 0xffffe000u);
    }
    emu_product<8>(c, A, B);
}

// kernel() on every thread of every block of grid, threads a block, shared_bytes of dynamic
// shared memory each, one block after another.
template <typename Kernel>
static void emu_launch(dim3 grid, int threads, size_t shared_bytes, Kernel kernel) {
    emu_watchdog();
    gridDim = grid, blockDim = dim3((unsigned)threads);
    for (unsigned y = 0; y < grid.y; y++)
        for (unsigned x = 0; x < grid.x; x++) {
            EmuBlock blk(threads, shared_bytes);
            std::vector<std::thread> team;
            for (int t = 0; t < threads; t++)
                team.emplace_back([&, t] {
                    threadIdx = dim3((unsigned)t), blockIdx = dim3(x, y);
                    emu_block = &blk, emu_exchanges = 0;
                    kernel();
                });
            for (std::thread &th : team) th.join();
        }
}

#endif
