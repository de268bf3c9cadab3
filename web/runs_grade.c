// runs_grade.c — grading a run from the web: its grade.json (GET /api/runs/<id>/grade), and
// grading it now with labs/command/grade (POST), once it has ended. See web.h.
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command/grade/grade.h"
#include "common/harness/check.h"
#include "common/runfiles/joblock.h"
#include "runs_internal.h"

#define GRADE_STACK_BYTES (16u << 20)

// ---------------------------------------------------------------------------------------
// Grading a run: GET and POST /api/runs/<id>/grade

int runs_grade_json(Web *w, const char *id, StrBuf *out, char *why, size_t whylen) {
    char dir[4400], path[4600];
    if (!run_exists(w, id, dir, sizeof dir)) return snprintf(why, whylen, "no such run"), 404;
    snprintf(path, sizeof path, "%s/grade.json", dir);
    StrBuf b;
    sb_init(&b);
    int rc = sb_read_file(&b, path, 1 << 20);
    if (rc != 0) {
        sb_free(&b);
        if (rc < 0 && errno == ENOENT)
            return snprintf(why, whylen, "run %.200s has no grade yet: POST /api/runs/%.200s/grade grades it", id, id), 404;
        return snprintf(why, whylen, "cannot read grade.json of run %.200s: %s", id,
                        rc > 0 ? "larger than 1 MiB" : strerror(errno)), 500;
    }
    // The file is the grader's, but the directory is the student's: say so if it is not JSON.
    char err[128];
    JsonValue *v = json_parse(b.data ? b.data : "", b.len, err, sizeof err);
    if (!v || v->type != JSON_OBJECT) {
        json_free(v);
        sb_free(&b);
        return snprintf(why, whylen, "grade.json of run %.200s is not a JSON object (%s): grade the run again", id,
                        v ? "another value" : err), 500;
    }
    json_free(v);
    sb_append(out, b.data, b.len);
    sb_free(&b);
    return 0;
}

// Grading runs on a thread of its own: the grader keeps a GradeRun and its references on the
// stack, more than CivetWeb's worker threads (small, fixed stacks) can hold under ASan.
typedef struct {
    Grade *g;
    const char *dir;
    const GradeRefs *refs;
    int written;
} GradeJob;

static void *grade_thread(void *arg) {
    GradeJob *job = arg;
    grade_rubric(job->g, job->dir, NULL, NULL, job->refs);
    job->written = grade_write_run(job->g) == 0;
    return NULL;
}

// One grading at a time: two requests for the same run would both start its reference run
// into the same ref-<lab>/ (and two of different runs would share the machine's cores).
// A second request waits here; it then finds the reference whole and reuses it.
static pthread_mutex_t grade_lock = PTHREAD_MUTEX_INITIALIZER;

int runs_grade(Web *w, const char *id, StrBuf *out, char *why, size_t whylen) {
    char dir[4400];
    if (!run_exists(w, id, dir, sizeof dir)) return snprintf(why, whylen, "no such run"), 404;
    int ended = runs_ended(w, id);
    if (ended < 0) return snprintf(why, whylen, "no such run"), 404;
    if (!ended)
        return snprintf(why, whylen, "run %.200s is still going: it can be graded once it has ended", id), 409;
    Grade *g = calloc_check(1, sizeof *g);  // (~20 KB: never on a worker's stack)
    GradeRefs *refs = calloc_check(1, sizeof *refs);
    if (strlen(dir) + 64 > sizeof g->run_dir || strlen(w->labs) >= sizeof refs->labs_dir) {
        free(g), free(refs);
        return snprintf(why, whylen, "the run's path (or the labs' %.100s) is too long for the grader", w->labs), 500;
    }
    memcpy(refs->labs_dir, w->labs, strlen(w->labs) + 1);  // (its length checked above)
    refs->ref_dir = NULL;  // the grader starts its own single-rank reference
    refs->quiet = 1;
    GradeJob job = {.g = g, .dir = dir, .refs = refs};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, GRADE_STACK_BYTES);
    pthread_mutex_lock(&grade_lock);
    // Held while graded, as `shardlab grade` holds it (joblock.h): another grader at work on
    // it (a person's, on the command line) gets it first, and this request a 409.
    JobLock lock;
    StrBuf held;
    sb_init(&held);
    char request[400];
    snprintf(request, sizeof request, "shardlab web: POST /api/runs/%.300s/grade", id);
    char *const grader[] = {request, NULL};
    int busy, rc = 0;
    if (joblock_take(&lock, "the run directory", dir, 0, grader, &held, &busy) != 0 && busy) rc = -1;
    pthread_t t;
    if (rc == 0 && (rc = pthread_create(&t, &attr, grade_thread, &job)) == 0) pthread_join(t, NULL);
    joblock_release(&lock);
    pthread_mutex_unlock(&grade_lock);
    pthread_attr_destroy(&attr);
    int status = 0;
    if (rc < 0) status = 409, snprintf(why, whylen, "%.600s: grade it once that job has ended", held.data);
    else if (rc != 0) status = 500, snprintf(why, whylen, "cannot start the grader: %s", strerror(rc));
    else if (!job.written)
        status = 500, snprintf(why, whylen, "graded %d/%d, but cannot write grade.json and grade.xml into %.200s", g->points,
                               g->max, dir);
    else grade_to_json(g, out);
    sb_free(&held);
    free(g);
    free(refs);
    return status;
}
