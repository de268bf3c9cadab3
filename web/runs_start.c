// runs_start.c — starting a lab from the web (POST /api/runs): a known lab, the options the
// catalog lets a form send, each checked as the lab's own parser checks it, the batch's split
// over the ranks and a memory estimate as the lab checks them, and an argv for the launcher,
// never a shell; at most --max-runs at once, and only as many as the memory holds together.
// See web.h.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "command/launch.h"
#include "common/harness/batchsplit.h"
#include "common/harness/catalog.h"
#include "common/harness/memfit.h"
#include "common/runfiles/runlog.h"
#include "runs_internal.h"

// ---------------------------------------------------------------------------------------
// Starting a lab: known labs, bounded options, an argv (no shell)

// What the form may send for a lab: the options its catalog entry marks CAT_FORM (catalog.c),
// nothing else (no paths: --run-dir, --data and the like are the command line's only).
static const CatOption *form_option(const CatLab *lab, const char *name) {
    const CatOption *o = catalog_find(lab, name);
    return o && (o->flags & CAT_FORM) ? o : NULL;
}

// "-12", "0.5", ".5", "1e-3": an optional minus, digits with at most one point, an optional
// exponent; nothing around it.
static int plain_decimal(const char *s) {
    const char *p = s + (*s == '-');
    size_t ints = strspn(p, "0123456789");
    p += ints;
    size_t frac = *p == '.' ? strspn(p + 1, "0123456789") : 0;
    if (*p == '.') p += 1 + frac;
    if (ints + frac == 0) return 0;
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '+' || p[1] == '-');
        size_t exp = strspn(p, "0123456789");
        if (exp == 0 || exp > 4) return 0;
        p += exp;
    }
    return *p == 0 && strlen(s) <= 64;
}

// One option's value as the text to pass to the lab, checked as the lab's own parser checks
// it (catalog_check: the same bounds and names); -1 with why.
static int field_value(Web *w, const CatOption *o, const JsonValue *v, char *out, size_t n, char *why, size_t whylen) {
    if (o->flags & CAT_RUN) {  // a run of ours that has ended, with a log to read the loss from
        char dir[4400], log[4600];
        if (v->type != JSON_STRING || !run_exists(w, v->string, dir, sizeof dir))
            return snprintf(why, whylen, "%s must name one of this server's runs (GET /api/runs lists them)", o->name), -1;
        snprintf(log, sizeof log, "%s/rank-0.jsonl", dir);
        if (access(log, R_OK) != 0 || runs_ended(w, v->string) != 1)
            return snprintf(why, whylen, "%s: run %.100s has not ended: compare with a finished run", o->name, v->string), -1;
        size_t len = strlen(dir);
        if (len >= n) return snprintf(why, whylen, "%s: the run's path is too long", o->name), -1;
        memcpy(out, dir, len + 1);
        return 0;
    }
    switch (o->kind) {
    case OPT_FLAG:
        if (v->type != JSON_BOOL) return snprintf(why, whylen, "%s is true or false", o->name), -1;
        snprintf(out, n, "%s", v->boolean ? "1" : "");
        return 0;
    case OPT_INT:
    case OPT_U64:
    case OPT_DOUBLE: {
        // A JSON number, or a string spelling one in plain decimal: strtod alone also takes
        // "nan", "inf" and hex. A whole number for INT and U64 (up to 2^53, what JSON holds
        // exactly); the bounds are the catalog's, checked below on the text.
        double x = NAN;
        if (v->type == JSON_NUMBER) x = v->number;
        else if (v->type == JSON_STRING && plain_decimal(v->string)) x = strtod(v->string, NULL);
        int whole = o->kind != OPT_DOUBLE;
        if (!isfinite(x) || (whole && (x != floor(x) || fabs(x) > 9007199254740992.0)))
            return snprintf(why, whylen, "%s must be %s", o->name, whole ? "a whole number" : "a number"), -1;
        if (whole) snprintf(out, n, "%lld", (long long)x);
        else snprintf(out, n, "%.9g", x);
        break;
    }
    case OPT_BYTES:
    case OPT_STRING:
        if (v->type != JSON_STRING || !v->string[0] || strlen(v->string) > 64)
            return snprintf(why, whylen, "%s must be a short text", o->name), -1;
        if (o->kind == OPT_STRING && !o->choices && strspn(v->string, o->chars ? o->chars : "") != strlen(v->string))
            return snprintf(why, whylen, "%s may hold only %s", o->name, o->chars ? o->chars : "nothing"), -1;
        snprintf(out, n, "%s", v->string);
        break;
    }
    return catalog_check(o, out, 1, why, whylen);
}

// ---------------------------------------------------------------------------------------
// How many runs at once, and the memory they hold together

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

// Whether a run of `ranks` ranks needing `need` may start now (start_lock held): 0; 400 with
// why if the machine cannot hold it even alone (its options must change); else 429 with why,
// and in id a run this server is running, if it must wait: --max-runs are running, or it fits
// alone but not beside what they hold. A run holds its slot until its launcher exits, or until
// every rank has logged its end (its page says it is over: starting the next one then must not
// depend on how fast the launcher tidies up). What a running run holds is its plan (per rank x
// ranks), not what it has taken so far: runs started together have taken nothing yet, and
// each would be compared alone with memory that none of them can have. Counting the plan of
// a run that has already taken its memory counts that memory twice: near the limit, a run is
// refused that might have fitted; never the other way round.
static int admit(Web *w, const MemNeed *need, int ranks, char *id, size_t idlen, char *why, size_t whylen) {
    double available = memfit_host_available();
    if (memfit_check(need, ranks, available, "host memory", "MemAvailable", why, whylen) != 0) return 400;
    char ids[WEB_MAX_RUNS][256];
    double planned[WEB_MAX_RUNS], held = 0;
    int launched = launched_running(ids, planned, WEB_MAX_RUNS), running = 0;
    for (int i = 0; i < launched; i++)
        if (runs_ended(w, ids[i]) != 1) {
            if (running != i) memcpy(ids[running], ids[i], sizeof ids[i]);
            held += planned[i];
            running++;
        }
    if (running == 0) return 0;
    snprintf(id, idlen, "%s", ids[0]);
    if (running >= w->max_runs) {
        if (w->max_runs == 1)
            snprintf(why, whylen, "this server runs one lab at a time, and run %s is running: start this one when it has "
                                  "ended, or restart shardlab web with --max-runs 2", ids[0]);
        else
            snprintf(why, whylen, "this server runs at most %d labs at once (--max-runs %d), and %d are running (the "
                                  "oldest: %s): start this one when one has ended, or restart shardlab web with a "
                                  "higher --max-runs", w->max_runs, w->max_runs, running, ids[0]);
        return 429;
    }
    if (available < 0) return 0;
    char source[512], held_text[32];
    snprintf(source, sizeof source, "MemAvailable, less the %s planned for the %d run%s this server is running: %s%s",
             format_bytes(held_text, sizeof held_text, held), running, running == 1 ? "" : "s", ids[0],
             running > 1 ? " and others" : "");
    if (memfit_check(need, ranks, available > held ? available - held : 0, "host memory", source, why, whylen) == 0) return 0;
    size_t used = strlen(why);
    snprintf(why + used, whylen - used, "; or start it when %s has ended", running == 1 ? ids[0] : "one of them");
    return 429;
}

// Creates the run's directory and starts its launcher (start_lock held): 0 with the run's id,
// or 500 with why.
static int launch(Web *w, const char *lab, int ranks, char **argv, const MemNeed *need, char *id, size_t idlen,
                  char *why, size_t whylen) {
    // The run's directory, named as the launcher names them, so the page can follow it at once.
    char dir[4400], problem[1200];
    if (runlog_try_new_dir(dir, sizeof dir, w->runs, lab, problem, sizeof problem) != 0)
        return snprintf(why, whylen, "cannot create a run directory: %s", problem), 500;
    const char *name = strrchr(dir, '/') + 1;  // the run's id: its directory's name
    // The launcher's stdout and stderr, to the server (runs.c keeps its last words): where the
    // ranks cannot write their logs, they are all that says why the run failed. Non-blocking,
    // so a server that falls behind never stalls a run; close-on-exec, so the server's other
    // children never hold the pipe open. Room for 1 MiB where the system allows it.
    int out[2];
    if (pipe2(out, O_CLOEXEC | O_NONBLOCK) != 0) out[0] = out[1] = -1;
    else (void)fcntl(out[1], F_SETPIPE_SZ, 1 << 20);
    // Left to run on its own (launch.h); reaped by runs_reap(), which the server calls as it waits.
    LaunchOpts lo = {.exe = w->launcher, .out_fd = out[1], .detach = 1};
    pid_t pid = launch_run(&lo, lab, ranks, argv, dir);
    int err = errno;
    if (out[1] >= 0) close(out[1]);
    if (pid < 0) {
        if (out[0] >= 0) close(out[0]);
        return snprintf(why, whylen, "cannot start the lab: %s", strerror(err)), 500;
    }
    launched_add(pid, name, need->rank * ranks, out[0]);
    snprintf(id, idlen, "%s", name);
    return 0;
}

int runs_start(Web *w, const JsonValue *req, char *id, size_t idlen, char *why, size_t whylen) {
    if (!req || req->type != JSON_OBJECT) return snprintf(why, whylen, "the body must be a JSON object"), 400;
    const JsonValue *lab = json_get(req, "lab"), *n = json_get(req, "n"), *steps = json_get(req, "steps"),
                    *opts = json_get(req, "options");
    const CatLab *form = lab && lab->type == JSON_STRING ? catalog_lab(lab->string) : NULL;
    if (!form) return snprintf(why, whylen, "lab must be one of the labs (single, collectives, ddp, ...)"), 400;
    if (!n || n->type != JSON_NUMBER || n->number < 1 || n->number > 8 || n->number != (int)n->number)
        return snprintf(why, whylen, "n must be a whole number of ranks from 1 to 8"), 400;
    if (form->max_world && n->number > form->max_world)
        return snprintf(why, whylen, "%s runs on at most %d rank%s", form->name, form->max_world, form->max_world > 1 ? "s" : ""), 400;
    if (!steps || steps->type != JSON_NUMBER || steps->number < 1 || steps->number > 100000 ||
        steps->number != (int)steps->number)
        return snprintf(why, whylen, "steps must be a whole number from 1 to 100000"), 400;
    if (opts && opts->type != JSON_OBJECT) return snprintf(why, whylen, "options must be an object"), 400;

    char *argv[56], store[4096], stext[16];  // the options; launch_run() adds the rest
    size_t used = 0;
    int a = 0;
#define PUSH(text)                                                            \
    do {                                                                      \
        size_t l_ = strlen(text) + 1;                                         \
        if (a >= 54 || used + l_ > sizeof store) return snprintf(why, whylen, "too many options"), 400; \
        memcpy(store + used, text, l_);                                       \
        argv[a++] = store + used;                                             \
        used += l_;                                                           \
    } while (0)
    snprintf(stext, sizeof stext, "%d", (int)steps->number);
    PUSH("--steps");
    PUSH(stext);
    for (size_t i = 0; opts && i < opts->count; i++) {
        const CatOption *fd = form_option(form, opts->keys[i]);
        if (!fd) return snprintf(why, whylen, "%s has no option '%.40s'", form->name, opts->keys[i]), 400;
        char value[1024], flag[48];
        if (field_value(w, fd, &opts->items[i], value, sizeof value, why, whylen) != 0) return 400;
        if (fd->kind == OPT_FLAG && !value[0]) continue;  // false: leave it out
        snprintf(flag, sizeof flag, "--%s", fd->name);
        PUSH(flag);
        if (fd->kind != OPT_FLAG) PUSH(value);
    }
    // The batch and the mesh divide over the ranks as the lab will check (batchsplit.h, the
    // labs' own check): else the lab's one line, with the nearest ranks and values that do,
    // and nothing started.
    BatchSplit split = batch_split_from_options(form->name, (int)n->number, a, argv);
    if (batch_split_check(&split, why, whylen) != 0) return 400;
    argv[a] = NULL;
#undef PUSH
    // The labs' own memory estimate (plan.h): a configuration inside the fields' bounds that
    // this machine cannot hold is refused here, with the same figures the lab would give.
    MemNeed need = memfit_need_options(form->name, (int)n->number, a, argv);
    // One start at a time from here to launched_add(): else twelve requests at once would each
    // count the same free slot and the same free memory (each run alone fits; all together
    // do not), and all start.
    pthread_mutex_lock(&start_lock);
    int st = admit(w, &need, (int)n->number, id, idlen, why, whylen);
    if (st == 0) st = launch(w, form->name, (int)n->number, argv, &need, id, idlen, why, whylen);
    pthread_mutex_unlock(&start_lock);
    return st;
}
