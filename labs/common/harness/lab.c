// lab.c — see lab.h.
#include "lab.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "memfit.h"

// Every record the collectives have kept: calls that are not a step's (start-up, a save).
static void drain(Lab *L) {
    if (L->records)
        while (dist_drain_records(&L->dist, L->records, LAB_MAX_RECORDS) == LAB_MAX_RECORDS) {}
}

// Rank 0's word on what it did for the whole job (holding a folder), to every rank: 0, or the
// status it exits with. d: NULL for a one-rank lab.
static int job_verdict(Dist *d, int code) {
    if (!d || d->world == 1) return code;
    float v = (float)code;
    dist_broadcast(&d->world_group, &v, 1, 0);
    return (int)v;
}

// What a rank does when rank 0 could not hold a folder for the job: rank 0 says why and exits
// with its status (2: the options asked for what cannot be; busy: another job holds it); the
// others stop before they write anything, naming rank 0 (the launcher follows "rank 0
// failed, so" to its line).
static void job_refused(Dist *d, int code, int busy, const char *what, const char *option, const char *dir,
                        const StrBuf *why, const char *lab) {
    int rank = d ? d->rank : 0;
    if (rank == 0 && code == 2) usage_error(lab, "%s", why->data);
    char hint[96];
    snprintf(hint, sizeof hint, "wait for that job to end, or give another %s", option);
    if (rank == 0) die(busy ? hint : "is the disk full? check it and the folder's permissions", "%s", why->data);
    die(NULL, "rank 0 failed, so rank %d stops: it could not hold %s %s for this job (rank 0's error says why)", rank, what,
        dir);
}

void lab_run_dir(Dist *d, const char *dir, int overwrite, const char *lab, char *const *argv, char *out, size_t n,
                 JobLock *lock) {
    lock->fd = -1;
    if (!dir || !*dir) dir = getenv("SHARDLAB_RUN_DIR");
    StrBuf why;
    sb_init(&why);
    if (dir && *dir) {
        if (runlog_check_path("--run-dir", dir, RUNLOG_ROOM, &why) != 0 || strlen(dir) >= n)
            usage_error(lab, "%s", why.data ? why.data : "--run-dir: path too long");
        memcpy(out, dir, strlen(dir) + 1);
        const char *inherited = getenv(JOBLOCK_FD_ENV);
        if (inherited && *inherited) {  // the launcher holds it for its ranks
            if (joblock_adopt(lock, "the run directory", dir, atoi(inherited), &why) != 0)
                die("start the ranks with shardlab run, or by hand without " JOBLOCK_FD_ENV, "%s", why.data);
            sb_free(&why);
            return;
        }
        // No launcher: rank 0 holds it for the job, and every rank waits for its word before
        // it writes a line there.
        int busy = 0, code = d && d->rank != 0 ? 0 : runlog_hold_dir(lock, dir, overwrite, argv, &why, &busy);
        if ((code = job_verdict(d, code)) != 0)
            job_refused(d, code, busy, "the run directory", "--run-dir", dir, &why, lab);
        sb_free(&why);
        return;
    }
    // Rank 0 names a new one (no other job has it) and holds it; the bytes of the name travel
    // as floats (a broadcast only copies bits).
    size_t nfloats = (n + sizeof(float) - 1) / sizeof(float);
    float *buf = calloc_check(nfloats, sizeof(float));
    int code = 0, busy = 0;
    if (!d || d->rank == 0) {
        runlog_new_dir(out, n, lab);
        code = runlog_hold_dir(lock, out, 0, argv, &why, &busy);
        memcpy(buf, out, strlen(out) + 1);
    }
    if ((code = job_verdict(d, code)) != 0) job_refused(d, code, busy, "the run directory", "--run-dir", out, &why, lab);
    if (d) dist_broadcast(&d->world_group, buf, nfloats, 0);
    memcpy(out, buf, n);
    out[n - 1] = 0;
    free(buf);
    sb_free(&why);
}

// Rank 0 holds a checkpoint folder for the job (shared: to read it) and tells the others.
static void hold_folder(Lab *L, JobLock *lock, const char *dir, int shared) {
    StrBuf why;
    sb_init(&why);
    int code = 0, busy = 0;
    if (L->rank == 0) {
        char failed[PATH_MAX];
        if (!shared && runlog_try_make_dirs(dir, failed, sizeof failed) != 0)
            sb_printf(&why, "cannot create the checkpoint folder '%s': %s", failed, strerror(errno)), code = 1;
        else if (joblock_take(lock, "the checkpoint folder", dir, shared, L->argv, &why, &busy) != 0)
            code = 1;
    }
    Dist *d = L->flags & LAB_ONE_RANK ? NULL : &L->dist;
    if ((code = job_verdict(d, code)) != 0)
        job_refused(d, code, busy, "the checkpoint folder", shared ? "--resume" : "--ckpt", dir, &why, L->name);
    sb_free(&why);
}

// Whether a and b are one folder (the same device and inode), however each is spelled.
static int same_folder(const char *a, const char *b) {
    struct stat x, y;
    return !strcmp(a, b) || (stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino);
}

// The checkpoint folders of this job, held before any rank reads or writes one: the one
// --save-every writes (--ckpt, else --resume's) exclusively, --resume's shared when the job
// only reads it (any number of jobs may start from one checkpoint, none may save into it
// meanwhile). The default, <run dir>/checkpoints, is held once the run directory is
// (lab_begin). Rank 0 holds them for the job (joblock.h).
static void hold_checkpoints(Lab *L) {
    const TrainArgs *a = L->a;
    const char *save = a->save_every > 0 ? (a->ckpt ? a->ckpt : a->resume) : NULL;
    if (save) hold_folder(L, &L->ckpt_lock, save, 0);
    if (a->resume && !(save && same_folder(save, a->resume))) hold_folder(L, &L->resume_lock, a->resume, 1);
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
    L->run_lock.fd = L->ckpt_lock.fd = L->resume_lock.fd = -1;
    L->profile_step = profile_step();
    L->env = flags & LAB_ONE_RANK ? (DistEnv){.world = 1, .local_world = 1} : dist_env(name);
    train_device(&L->dev, a, name, L->env.local_rank, L->env.local_world);
    memfit_check_rank(name, a, &L->dev, L->env.world, L->env.local_world, argc, argv);  // before anything is allocated
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
    hold_checkpoints(L);  // before any rank reads --resume: nobody saves there meanwhile
    if (a->resume) dcp_open(&L->resume, a->resume, &L->cfg, a, L->name);  // checked before anything is written
    char run_dir[PATH_MAX];
    lab_run_dir(L->flags & LAB_ONE_RANK ? NULL : &L->dist, a->run_dir, a->overwrite, L->name, L->argv, run_dir,
                sizeof run_dir, &L->run_lock);
    if (a->save_every > 0 && !a->ckpt && !a->resume) {  // its saves go to <run dir>/checkpoints
        char ckpt[sizeof run_dir + 16];
        snprintf(ckpt, sizeof ckpt, "%s/checkpoints", run_dir);
        hold_folder(L, &L->ckpt_lock, ckpt, 0);
    }
    runlog_open(&L->log, L->name, L->rank, L->world, run_dir);
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
    joblock_release(&L->ckpt_lock), joblock_release(&L->resume_lock), joblock_release(&L->run_lock);
    mem_destroy(&L->mem);
    device_close(&L->dev);
    if (!(L->flags & LAB_NO_CORPUS)) corpus_free(&L->corpus);
}
