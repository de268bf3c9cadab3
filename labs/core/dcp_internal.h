// dcp_internal.h — what the checkpoint's three files share: dcp.c (the state, saving),
// dcp_open.c (opening a checkpoint and checking all of it) and dcp_load.c (reading each
// rank's ranges back). The format's fixed strings, the rank files' names and checksums, and
// how a check refuses a checkpoint.
//
// Defines: DCP_FORMAT, DCP_CHECKSUM_FIELD, dcp_file_fnv(), dcp_shard_name(), DcpRefuse,
//          dcp_refuse(), dcp_load_pieces().
#ifndef SHARDLAB_DCP_INTERNAL_H
#define SHARDLAB_DCP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

#define DCP_FORMAT "shardlab-checkpoint/1"
#define DCP_CHECKSUM_FIELD ",\"checksum\":\""

// dcp.c: the FNV-1a 64 of the file at path and its size in *bytes (both 0 if it cannot be
// opened); a rank's file, under the checkpoint directory: step-<step>/rank-<r>-of-<N>.safetensors.
uint64_t dcp_file_fnv(const char *path, uint64_t *bytes);
void dcp_shard_name(char *out, size_t n, int64_t step, int rank, int world);

// dcp_open.c: who refuses a checkpoint (the lab, for the message) and which one.
typedef struct {
    const char *prog, *dir;
} DcpRefuse;
__attribute__((format(printf, 3, 4), noreturn)) void dcp_refuse(const DcpRefuse *r, const char *file,
                                                                const char *fmt, ...);

// dcp_load.c: a rank file's pieces, read whole (dcp_open checks them so, dcp_load reads them).
float **dcp_load_pieces(const DcpRefuse *rf, const DcpFile *f);

#endif
