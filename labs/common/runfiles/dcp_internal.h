// dcp_internal.h — what the checkpoint's three files share: dcp.c (the state, saving),
// dcp_open.c (opening a checkpoint and checking all of it) and dcp_load.c (reading each
// rank's ranges back). The format's fixed strings, the rank files' names and checksums, the
// paths' limits, what must hold of the values, and how a check refuses a checkpoint.
//
#ifndef SHARDLAB_DCP_INTERNAL_H
#define SHARDLAB_DCP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

#define DCP_FORMAT "shardlab-checkpoint/2"
#define DCP_CHECKSUM_FIELD ",\"checksum\":\""

// The longest a checkpoint's own names make a path under its directory: a rank file's
// temporary at the largest step (--steps is at most 10^7), world and process id. A directory
// leaves room for it, or it is refused before anything is written (dcp_check_paths).
#define DCP_PATH_TAIL "/step-99999999/rank-4095-of-4096.safetensors.tmp.4294967295"

// dcp.c: the FNV-1a 64 of the file at path and its size in *bytes (both 0 if it cannot be
// opened); a rank's file, under the checkpoint directory: step-<step>/rank-<r>-of-<N>.safetensors.
uint64_t dcp_file_fnv(const char *path, uint64_t *bytes);
void dcp_shard_name(char *out, size_t n, int64_t step, int rank, int world);
// A path into out[PATH_MAX], printf-style. One that does not fit dies: the directories were
// checked to leave room, so this is a bug, and a path is never cut.
void dcp_path(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// What must hold of every element of a piece of the state x (its p->count floats, in host
// memory): weights and moments finite, v (a mean of squared gradients) never negative. 0, or
// -1 with why naming the model's tensor, the element and its value.
int dcp_check_values(const GptConfig *c, const DcpPiece *p, const float *x, char *why, size_t n);

// dcp_open.c: who refuses a checkpoint (the lab, for the message) and which one.
typedef struct {
    const char *prog, *dir;
} DcpRefuse;
__attribute__((format(printf, 3, 4), noreturn)) void dcp_refuse(const DcpRefuse *r, const char *file,
                                                                const char *fmt, ...);

// dcp_load.c: a rank file's pieces, read whole (dcp_open checks them so, dcp_load reads them).
float **dcp_load_pieces(const DcpRefuse *rf, const DcpFile *f);

#endif
