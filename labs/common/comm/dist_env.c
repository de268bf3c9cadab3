// dist_env.c — see dist.h: who this rank is, read from the variables that torchrun,
// mpirun, srun or 'shardlab run' set (dist_env), and what names the job's shared memory when
// no launcher made it (dist_master_port, dist_job_key: dist_backend.h).
#include "dist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"
#include "dist_backend.h"

// The first of these environment variables that is set (NULL if none), and its name.
static const char *first_env(const char *const names[], const char **which) {
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) {
            *which = names[i];
            return v;
        }
    }
    return NULL;
}

// An integer from the first variable of names that is set, in [lo, hi]; fallback if none is.
// Slurm writes counts per node as "2(x3)": the leading number is the one wanted.
static long env_long(const char *const names[], long lo, long hi, long fallback) {
    const char *which, *v = first_env(names, &which);
    if (!v) return fallback;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    int slurm_list = strncmp(which, "SLURM_", 6) == 0 && *end == '(';
    if (errno || end == v || (*end && !slurm_list) || x < lo || x > hi)
        die("'shardlab run <lab> -n N' sets these variables for every rank",
            "%s=%s: expected an integer from %ld to %ld", which, v, lo, hi);
    return x;
}

// torchrun's names first, then Open MPI's (mpirun), then Slurm's (srun).
static const char *const RANK_VARS[] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", NULL};
static const char *const WORLD_VARS[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", NULL};
static const char *const LOCAL_RANK_VARS[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", NULL};
static const char *const LOCAL_WORLD_VARS[] = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                               "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", NULL};

DistEnv dist_env(const char *lab) {
    const char *rank_var = NULL, *world_var = NULL;
    int have_rank = first_env(RANK_VARS, &rank_var) != NULL, have_world = first_env(WORLD_VARS, &world_var) != NULL;
    if (have_rank != have_world)
        die("set both RANK and WORLD_SIZE (or neither, for one rank), or use 'shardlab run <lab> -n N'",
            "%s: %s is set but %s is not", lab, have_rank ? rank_var : world_var, have_rank ? "WORLD_SIZE" : "RANK");
    DistEnv e;
    e.source = !have_rank                                ? "none"
               : strcmp(rank_var, "RANK") == 0           ? "torchrun"
               : strncmp(rank_var, "OMPI_", 5) == 0      ? "Open MPI"
                                                         : "Slurm";
    e.world = (int)env_long(WORLD_VARS, 1, DIST_MAX_RANKS, 1);
    e.rank = (int)env_long(RANK_VARS, 0, e.world - 1, 0);
    e.local_rank = (int)env_long(LOCAL_RANK_VARS, 0, e.world - 1, e.rank);
    e.local_world = (int)env_long(LOCAL_WORLD_VARS, 1, e.world, e.world);
    if (e.local_rank >= e.local_world)
        die("LOCAL_RANK counts the ranks of one node from 0 to LOCAL_WORLD_SIZE-1",
            "%s: LOCAL_RANK %d is not below LOCAL_WORLD_SIZE %d", lab, e.local_rank, e.local_world);
    return e;
}

long dist_master_port(void) { return env_long((const char *const[]){"MASTER_PORT", NULL}, 1, 65535, 29500); }

// What names this run's shared memory when no launcher made it: MASTER_PORT, else the job
// that mpirun or srun started (every rank of a job sees the same id), else the default port.
// what: the same in words, for messages ("MASTER_PORT=29501").
void dist_job_key(char *out, size_t n, char *what, size_t nwhat) {
    static const char *const jobs[] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", NULL};
    const char *port = getenv("MASTER_PORT"), *which = NULL;
    const char *v = port && *port ? NULL : first_env(jobs, &which);
    if (!v) {
        snprintf(out, n, "%ld", dist_master_port());
        if (port && *port) snprintf(what, nwhat, "MASTER_PORT=%s", out);
        else snprintf(what, nwhat, "MASTER_PORT %s (the default: MASTER_PORT is not set)", out);
        return;
    }
    const char *step = strcmp(which, "SLURM_JOB_ID") == 0 ? getenv("SLURM_STEP_ID") : NULL;
    snprintf(out, n, "%s%s%s", v, step ? "." : "", step ? step : "");
    snprintf(what, nwhat, "%s=%.60s%s%.20s", which, v, step ? " SLURM_STEP_ID=" : "", step ? step : "");
    for (char *c = out; *c; c++)
        if (*c == '/') *c = '_';  // a shm name has one slash, at the start
}
