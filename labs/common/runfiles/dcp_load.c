// dcp_load.c — see dcp.h: resharding. Each rank reads back, from a checkpoint dcp_open()
// has checked, the ranges its own layout holds: from every file that has a piece overlapping
// one of them, whatever the layout and the number of ranks that saved it.
#include "dcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"
#include "dcp_internal.h"
#include "safetensors.h"

// Reads a file's pieces into host buffers (safetensors_load checks dtype, shapes and that the
// tensors tile the data). data[i] gets pieces[i]; free each.
float **dcp_load_pieces(const DcpRefuse *rf, const DcpFile *f) {
    StTensor *t = calloc_check((size_t)f->npieces + 1, sizeof *t);
    char (*names)[48] = calloc_check((size_t)f->npieces + 1, sizeof *names);
    float **data = calloc_check((size_t)f->npieces + 1, sizeof *data);
    for (int i = 0; i < f->npieces; i++) {
        const DcpPiece *p = &f->pieces[i];
        snprintf(names[i], sizeof names[i], "%s.%d.%zu", dcp_kind_name(p->kind), p->unit, p->offset);
        data[i] = malloc_check(p->count * sizeof(float));
        t[i] = (StTensor){.name = names[i], .ndim = 1, .shape = {(int64_t)p->count}, .data = data[i]};
    }
    char err[2 * PATH_MAX];
    if (safetensors_load(f->file, t, f->npieces, err, sizeof err) != 0) dcp_refuse(rf, f->name, "%s", err);
    free(t);
    free(names);
    return data;
}

void dcp_load(Dcp *ck, const Device *dev, const DcpState *state) {
    DcpRefuse rf = {"resume", ck->dir};
    // Staging: each wanted piece in host memory, filled file by file, then moved in place.
    float **stage = calloc_check((size_t)state->n + 1, sizeof *stage);
    for (int i = 0; i < state->n; i++)
        stage[i] = state->p[i].host ? state->p[i].data : malloc_check(state->p[i].count * sizeof(float));
    for (int f = 0; f < ck->world; f++) {
        const DcpFile *file = &ck->files[f];
        int wanted = 0;
        for (int i = 0; i < file->npieces && !wanted; i++)
            for (int j = 0; j < state->n && !wanted; j++) {
                const DcpPiece *have = &file->pieces[i], *want = &state->p[j];
                wanted = have->kind == want->kind && have->unit == want->unit &&
                         have->offset < want->offset + want->count && want->offset < have->offset + have->count;
            }
        if (!wanted) continue;
        float **data = dcp_load_pieces(&rf, file);
        for (int i = 0; i < file->npieces; i++)
            for (int j = 0; j < state->n; j++) {
                const DcpPiece *have = &file->pieces[i], *want = &state->p[j];
                if (have->kind != want->kind || have->unit != want->unit) continue;
                size_t lo = have->offset > want->offset ? have->offset : want->offset;
                size_t hi_have = have->offset + have->count, hi_want = want->offset + want->count;
                size_t hi = hi_have < hi_want ? hi_have : hi_want;
                if (lo < hi)
                    memcpy(stage[j] + (lo - want->offset), data[i] + (lo - have->offset), (hi - lo) * sizeof(float));
            }
        for (int i = 0; i < file->npieces; i++) free(data[i]);
        free(data);
    }
    for (int i = 0; i < state->n; i++)
        if (!state->p[i].host) {
            device_from_host(dev, state->p[i].data, stage[i], state->p[i].count * sizeof(float));
            free(stage[i]);
        }
    free(stage);
}

int64_t dcp_resume(Dcp *ck, const Device *dev, const DcpState *state, RunLog *log) {
    int64_t t0 = runlog_now_us();
    dcp_load(ck, dev, state);
    int64_t t1 = runlog_now_us(), step = ck->step;
    if (log->rank == 0)
        runlog_printf(log, "resume: step %lld of a %s run on %d rank(s), from %s (%.1f ms); training goes on at step %lld\n%s",
                      (long long)step, ck->lab, ck->world, ck->dir, (double)(t1 - t0) / 1000.0, (long long)step + 1,
                      ck->notes);
    runlog_span(log, step, "load", -1, -1, t0, t1, 0);
    runlog_check(log, "resume.step", 1, (double)step, (double)step);
    dcp_close(ck);
    return step + 1;
}
