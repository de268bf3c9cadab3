// tp_internal.h — what slices.c (the layout) lends tensor_parallel.c (the passes): how the
// passes carve the workspace that tp_workspace_floats() sized.
//
#ifndef SHARDLAB_TP_INTERNAL_H
#define SHARDLAB_TP_INTERNAL_H

#include <stddef.h>

#include "tensor_parallel.h"  // defines: tp_workspace_floats(), Tp

// Hand out the next n floats of one big buffer (*cursor moves past them).
float *tp_take(float **cursor, size_t n);
// The most scratch one of this rank's Linear layers asks for (ops.h: linear_scratch_floats).
size_t tp_linear_floats(const Tp *tp);
// --mixed: the fp32 form of an activation kept in bf16 (0 without --mixed).
size_t tp_kept_floats(const Tp *tp);

#endif
