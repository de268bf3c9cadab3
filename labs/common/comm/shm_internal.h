// shm_internal.h — what shm.c (the segment: creating, attaching, sweeping) and shm_chan.c
// (the channel calls and their waits) share: the segment's layout, the clock every process
// of the machine reads, and what /proc says about a rank's process.
//
#ifndef SHARDLAB_SHM_INTERNAL_H
#define SHARDLAB_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shm.h"

// Bumped whenever ShmHeader changes: a named segment made by another build of shardlab (0:
// one from before the job record) is never joined, only judged by its creator's fields,
// which stay where they are.
#define SHM_LAYOUT 2

// The job a named segment belongs to, written by the rank 0 that made it before the segment
// appears and never changed after: the ranks that come later compare themselves with it
// (lab, world, arguments), and those turned away are told whose job it is.
typedef struct {
    int64_t created_unix;            // when it was made (wall clock, seconds)
    char lab[32];                    // "ddp"
    uint64_t args_hash;              // FNV-1a 64 of all of rank 0's arguments, each with its NUL
    uint32_t args_len;               // bytes of them kept below (the first ones, cut at 1 KiB)
    char args[1024];
    char cwd[512];                   // rank 0's working directory
    char run_dir[512];               // the run directory rank 0 was given (SHARDLAB_RUN_DIR), or ""
} ShmJobRecord;

// The segment: this header, rounded up to a page (shm_header_bytes), then a channel for every
// ordered pair of ranks, channel (from, to) at index from * world + to.
struct ShmHeader {
    _Atomic uint64_t magic;          // written last by the creator: the segment is ready
    int32_t world;
    int32_t creator_pid;
    uint64_t creator_start;          // when the creator started (/proc/<pid>/stat): a pid is reused
    _Atomic int32_t pid[SHM_MAX_RANKS];  // each rank's process, 0 until it attached
    _Atomic int32_t aborted;         // 0, or 1 + the rank that failed
    char abort_msg[512];
    // Who waits for whom, so a timed-out wait can name the rank that holds everyone up and
    // not just its neighbour (in a ring, rank 1 waits for rank 0, which waits for the stuck
    // rank 3): waiting[r] is 1 + the rank r sleeps waiting for (0: none), beat_us[r] when r
    // last woke up in that wait (it wakes every 50 ms, so a stale beat means it is not running).
    _Atomic int32_t waiting[SHM_MAX_RANKS];
    _Atomic int64_t beat_us[SHM_MAX_RANKS];
    _Atomic int32_t stop_signal;     // the launcher is stopping the run on this signal (Ctrl-C...)
    // Named segments only (the launcher's has no job record: layout 2, joined 0, job zeroed).
    int32_t layout;                  // SHM_LAYOUT of the build that made it
    int32_t joined;                  // 1: this is the page that keeps a running job's name (shm_joined)
    ShmJobRecord job;
};

// One direction between two ranks. head and tail live on their own cache lines: the sender
// writes one, the receiver the other.
struct ShmChan {
    _Alignas(64) _Atomic uint32_t head;  // pieces committed by the sender
    _Atomic uint32_t head_sleepers;      // receivers asleep on head (0 or 1)
    _Alignas(64) _Atomic uint32_t tail;  // pieces released by the receiver
    _Atomic uint32_t tail_sleepers;
    _Alignas(64) uint32_t len[SHM_SLOTS];  // floats in each slot's piece
    _Alignas(64) float data[SHM_SLOTS][SHM_PIECE_FLOATS];
};

size_t shm_header_bytes(void);
// Seconds on the clock every process of the machine shares (CLOCK_MONOTONIC).
double shm_now_s(void);
// shm.c: whether a rank's process still runs (kill(pid, 0)), and its state letter in
// /proc/<pid>/stat ('T': stopped; 0 if unknown).
int shm_process_alive(int pid);
char shm_process_state(int pid);

#endif
