// lab.c — see lab.h.
#include "lab.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan.h"

// Every record the collectives have kept: calls that are not a step's (start-up, a save).
static void drain(Lab *L) {
    if (L->records)
        while (dist_drain_records(&L->dist, L->records, LAB_MAX_RECORDS) == LAB_MAX_RECORDS) {}
}

void lab_run_dir(Dist *d, const char *dir, const char *lab, char *out, size_t n) {
    if (!dir || !*dir) dir = getenv("SHARDLAB_RUN_DIR");
    if (dir && *dir) {
        if ((size_t)snprintf(out, n, "%s", dir) >= n) die(NULL, "run directory path too long: '%s'", dir);
        return;
    }
    // Rank 0 names it; the bytes of the name travel as floats (a broadcast only copies bits).
    size_t nfloats = (n + sizeof(float) - 1) / sizeof(float);
    float *buf = calloc_check(nfloats, sizeof(float));
    if (d->rank == 0) {
        runlog_new_dir(out, n, lab);
        memcpy(buf, out, strlen(out) + 1);
    }
    dist_broadcast(&d->world_group, buf, nfloats, 0);
    memcpy(out, buf, n);
    out[n - 1] = 0;
    free(buf);
}

// SHARDLAB_PROFILE_STEP: the step a profiler captures (lab_step_begin), 0 when unset.
static int64_t profile_step(void) {
    const char *s = getenv("SHARDLAB_PROFILE_STEP");
    if (!s || !*s) return 0;
    char *end;
    long long step = strtoll(s, &end, 10);
    if (*end || step < 1 || step > (1LL << 40))
        die("SHARDLAB_PROFILE_STEP is the step to profile, e.g. 3; unset it to profile none",
            "SHARDLAB_PROFILE_STEP=%s is not a step number", s);
    return step;
}

void lab_open(Lab *L, const char *name, TrainArgs *a, int argc, char **argv, unsigned flags) {
    *L = (Lab){.name = name, .a = a, .flags = flags, .argc = argc, .argv = argv, .backend = "none", .world = 1};
    L->profile_step = profile_step();
    L->env = flags & LAB_ONE_RANK ? (DistEnv){.world = 1, .local_world = 1} : dist_env(name);
    train_device(&L->dev, a, name, L->env.local_rank, L->env.local_world);
    plan_check_rank(name, a, &L->dev, L->env.world, L->env.local_world, argc, argv);  // before anything is allocated
    if (!(flags & LAB_ONE_RANK)) {
        dist_init(&L->dist, name, &L->dev);
        L->world = L->dist.world, L->rank = L->dist.rank, L->backend = L->dist.backend;
        if (link_find(a->link)) dist_emulate_link(&L->dist, link_find(a->link), a->link_scale);
    }
    char who[64];
    snprintf(who, sizeof who, "%s rank %d", name, L->rank);
    check_set_context(who);
}

void lab_begin(Lab *L, const char *what, ...) {
    TrainArgs *a = L->a;
    L->cfg = train_model_config(a);
    if (a->resume) dcp_open(&L->resume, a->resume, &L->cfg, a, L->name);  // checked before anything is written
    if (L->flags & LAB_ONE_RANK) {
        runlog_open(&L->log, L->name, 0, 1, a->run_dir);
    } else {
        char run_dir[3072];
        lab_run_dir(&L->dist, a->run_dir, L->name, run_dir, sizeof run_dir);
        runlog_open(&L->log, L->name, L->rank, L->world, run_dir);
    }
    char line[1024];
    va_list ap;
    va_start(ap, what);
    vsnprintf(line, sizeof line, what, ap);
    va_end(ap);
    runlog_printf(&L->log, "%s: %s; run directory %s\n", L->name, line, L->log.dir);
    train_say_device(&L->log, &L->dev, L->world);
    L->floor = -1.0;
    if (!(L->flags & LAB_NO_CORPUS)) {
        train_corpus(&L->corpus, a);
        if (L->corpus.synthetic) L->floor = L->corpus.loss_floor;
    }
    mem_init(&L->mem, &L->dev);
    L->tokens_per_step = (double)a->batch * a->seq;
}

void lab_start(Lab *L, uint64_t params, const char *lab_fields) {
    sb_init(&L->config);
    train_config_json(&L->config, L->a, lab_fields);
    runlog_meta(&L->log, L->argc, L->argv, L->dev.name, L->backend, L->config.data);
    runlog_start(&L->log, &L->dev, L->backend, params, L->config.data, L->floor);
    if (!(L->flags & LAB_ONE_RANK)) L->records = malloc_check(LAB_MAX_RECORDS * sizeof *L->records);
}

int64_t lab_first_step(Lab *L, const DcpState *load, DistGroup *save_group) {
    int64_t first = L->a->resume && load ? dcp_resume(&L->resume, &L->dev, load, &L->log) : 1;
    dcp_saver_init(&L->saver, L->name, L->a, &L->cfg, &L->dev, save_group, &L->log, L->log.dir, L->config.data);
    drain(L);  // the start-up's collectives are not a step's
    progress_init(&L->progress, L->a);
    train_tally_start(&L->tally, first);
    train_catch_signals();
    return first;
}

int lab_step_begin(Lab *L, int64_t step) {
    int interrupted = train_interrupted(&L->log, step - 1);
    if (interrupted) return interrupted;
    L->step = step;
    if (step == L->profile_step) device_profile(&L->dev, 1);
    L->t0_us = runlog_now_us();
    L->sent0 = L->records ? L->dist.stats.bytes_sent : 0;
    L->recv0 = L->records ? L->dist.stats.bytes_recv : 0;
    return 0;
}

double lab_step_end(Lab *L, StepRecord *rec, const DcpState *save) {
    // The step as the clock on the wall saw it: everything since the last step's record
    // (logging, hashing, checkpoints too); rec->ms_work is its work alone.
    rec->ms_step = train_tally_step(&L->tally, rec->step, rec->loss);
    if (L->records && !rec->bytes_sent && !rec->bytes_recv) {
        rec->bytes_sent = L->dist.stats.bytes_sent - L->sent0;
        rec->bytes_recv = L->dist.stats.bytes_recv - L->recv0;
    }
    if (!rec->mem) rec->mem = &L->mem;
    runlog_step(&L->log, rec);
    if (L->rank == 0) progress_update(&L->progress, &L->log, rec->step, rec->loss, L->floor, rec->ms_step);
    if (rec->step == L->profile_step) device_profile(&L->dev, 0);
    if (save && dcp_due(L->a, rec->step)) {
        dcp_save(&L->saver, rec->step, save);
        drain(L);  // the save's collectives are not the next step's
    }
    return rec->ms_step;
}

void lab_replica_create(Lab *L, Gpt *model, GptAdamW *adam) {
    gpt_create(model, &L->cfg, &L->mem, L->a->seed);
    if (L->a->init) train_load_weights(model, L->a->init);
    if (!(L->flags & LAB_ONE_RANK))
        for (int l = 0; l < model->nlayers; l++)
            dist_broadcast(&L->dist.world_group, model->params[l], gpt_layer_size(&L->cfg, l), 0);
    gpt_adamw_create(adam, model, L->a);
}

double lab_replica_update(Lab *L, Gpt *model, GptAdamW *adam, double *lr) {
    int64_t t_opt = runlog_now_us();
    *lr = train_lr(L->a, L->step);  // the schedule: warmup, then cosine decay (adamw.h)
    double grad_norm = train_clip_and_update(model, adam, L->a->clip, *lr, L->step);
    L->t1_us = runlog_now_us();
    runlog_span(&L->log, L->step, "optim", -1, -1, t_opt, L->t1_us, 0);
    return grad_norm;
}

void lab_replica_memory(Lab *L, int micro, const char *acts_formula, double acts_bytes, int replicas) {
    double psi = (double)gpt_num_params(&L->cfg);
    if (!acts_formula) acts_bytes = train_acts_formula(&L->cfg, micro, &acts_formula);
    MemRow rows[] = {
        {.cat = MEM_PARAMS, .formula = replicas ? "4 Psi (a full replica)" : "4 Psi", .expect = 4 * psi},
        {.cat = MEM_GRADS, .formula = "4 Psi", .expect = 4 * psi},
        {.cat = MEM_OPTIM, .formula = "8 Psi (AdamW m and v)", .expect = 8 * psi},
        {.cat = MEM_ACTS, .formula = acts_formula, .expect = acts_bytes},
        {.cat = MEM_COMM, .formula = "0 (all-reduced in place)", .expect = 0},
    };
    train_report_memory(&L->log, &L->mem, NULL, &L->cfg, micro, rows, replicas ? 5 : 4);
}

double lab_replica_step_end(Lab *L, const Gpt *model, StepRecord *rec, int64_t comm_us, const DcpState *save) {
    double ms = (double)(L->t1_us - L->t0_us) / 1000.0, comm_ms = (double)comm_us / 1000.0;
    rec->ms_work = ms, rec->ms_compute = ms - comm_ms, rec->ms_comm = comm_ms;
    rec->param_hash = gpt_param_hash(model);
    return lab_step_end(L, rec, save);
}

void lab_replica_close(Lab *L, Gpt *model, GptAdamW *adam, GptActs *acts, const char *extra) {
    if (L->a->save && L->rank == 0) {
        train_save_weights(model, L->a->save);
        runlog_printf(&L->log, "weights: saved to %s\n", L->a->save);
    }
    lab_finish(L, gpt_param_hash(model), extra);
    gpt_adamw_destroy(adam);
    gpt_acts_free(acts, &L->mem);
    gpt_destroy(model);
    lab_close(L);
}

void lab_finish(Lab *L, uint64_t param_hash, const char *extra) {
    train_finish(&L->log, L->a, &L->tally, L->tokens_per_step, L->floor, L->world, param_hash, mem_peak(&L->mem), extra);
}

void lab_close(Lab *L) {
    if (!(L->flags & LAB_ONE_RANK)) {
        dist_barrier(&L->dist.world_group);  // nobody tears down shared memory while others still talk
        dist_destroy(&L->dist);
    }
    free(L->records);
    sb_free(&L->config);
    runlog_close(&L->log);
    mem_destroy(&L->mem);
    device_close(&L->dev);
    if (!(L->flags & LAB_NO_CORPUS)) corpus_free(&L->corpus);
}
