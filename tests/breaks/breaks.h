// breaks.h — the deliberately broken labs: what the graders' own tests must catch.
//
// A grader that cannot fail is a defect, so each lab's test runs a broken copy of the lab and
// proves that its checks fail it. The broken copy is the lab itself, linked with one file of
// this folder (the Makefile's BREAK_BINS: build/breaks/<lab>, from the optimized objects the
// lab is built from). That file misbehaves in one step of the algorithm, put in with the
// linker's --wrap, as the grader's reference programs put in its solutions
// (labs/command/grade/solutions.c): -Wl,--wrap=fn sends every call of fn() made in another object
// file to __wrap_fn() here, which can still call the real one as __real_fn(). So the lab
// files students read hold no trace of the tests. Each break:
//
//   ddp.c    bucket 0's all-reduce runs, but its sum is not used
//   zero.c   unit 0's updated weights are not all-gathered (--stage 1 or 2)
//   fsdp.c   unit 0's gradient is not reduce-scattered
//   tp.c     block 0's attention f skips its backward all-reduce (--sp: reduce-scatter)
//   pp.c     micro-batch 0's gradient is sent as zeros
//   ckpt.c   checkpointed blocks are not recomputed: the backward reads a stale workspace
//   shard.c  ranks 1.. start one position early: their parts overlap
//
// Defines: BREAK_WHAT (each break file's), __wrap_lab_start() (breaks.c: every broken lab
//          says so in its log, after the start event).
#ifndef SHARDLAB_BREAKS_H
#define SHARDLAB_BREAKS_H

#include <stdint.h>

#include "common/harness/lab.h"

// What the break does, in a few words: defined by each break file, printed by breaks.c.
extern const char BREAK_WHAT[];

void __real_lab_start(Lab *L, uint64_t params, const char *lab_fields);
void __wrap_lab_start(Lab *L, uint64_t params, const char *lab_fields);

#endif
