// runlog.c — see runlog.h for the schema.
#include "runlog.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rng.h"

int64_t runlog_now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

int runlog_try_make_dirs(const char *path, char *failed, size_t n) {
    char buf[sizeof ((RunLog *)0)->dir];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p && *p != '/') continue;
        char c = *p;
        *p = 0;
        struct stat st;
        if (mkdir(buf, 0755) != 0 && (errno != EEXIST || stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))) {
            int e = errno == EEXIST ? ENOTDIR : errno;
            snprintf(failed, n, "%s", buf);
            errno = e;
            return -1;
        }
        if (!(*p = c)) return 0;
    }
}

void runlog_make_dirs(const char *path) {
    char failed[sizeof ((RunLog *)0)->dir];
    if (runlog_try_make_dirs(path, failed, sizeof failed) != 0)
        die("check the path and its permissions", "cannot create directory '%s': %s", failed, strerror(errno));
}

// <root>/<lab>-<YYYYmmdd-HHMMSS, UTC>-<4 hex>, a name no other run has: the one namer of run
// directories (the launcher's, a lab's started alone, the web's).
int runlog_try_new_dir(char *out, size_t n, const char *root, const char *lab, char *why, size_t whylen) {
    char failed[sizeof ((RunLog *)0)->dir];
    if (runlog_try_make_dirs(root, failed, sizeof failed) != 0)
        return snprintf(why, whylen, "cannot create directory '%s': %s", failed, strerror(errno)), -1;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned tag = (unsigned)(rng_hash((uint64_t)runlog_now_us(), (uint64_t)getpid(), (uint64_t)attempt) & 0xffff);
        if ((size_t)snprintf(out, n, "%s/%s-%s-%04x", root, lab, stamp, tag) >= n)
            return snprintf(why, whylen, "run directory path too long under '%s'", root), -1;
        if (mkdir(out, 0755) == 0) return 0;
        if (errno != EEXIST)
            return snprintf(why, whylen, "cannot create run directory '%s': %s", out, strerror(errno)), -1;
    }
    return snprintf(why, whylen, "could not find a free run directory name under '%s'", root), -1;
}

void runlog_new_dir(char *out, size_t n, const char *lab) {
    const char *root = getenv("SHARDLAB_RUNS");
    if (!root || !*root) root = "runs";
    char why[1024];
    if (runlog_try_new_dir(out, n, root, lab, why, sizeof why) != 0)
        die("check that the runs directory (SHARDLAB_RUNS) is writable and its path short enough", "%s", why);
}

static void write_line(RunLog *r) {
    sb_json_quote_nonfinite(&r->line);  // a NaN printed by %g is not JSON: see the schema
    sb_append(&r->line, "\n", 1);
    // One fwrite and a flush per event: a reader tailing the file sees whole lines.
    if (fwrite(r->line.data, 1, r->line.len, r->events) != r->line.len || fflush(r->events) != 0) {
        FILE *f = r->events;
        r->events = NULL;  // do not try again from die()'s hook
        fclose(f);
        die("is the disk full?", "cannot write to the event log in %s: %s", r->dir, strerror(errno));
    }
    sb_reset(&r->line);
}

static void begin_event(RunLog *r, const char *ev) {
    sb_reset(&r->line);
    sb_printf(&r->line, "{\"ev\":\"%s\",\"rank\":%d", ev, r->rank);
}

static void on_die(const char *msg, void *arg) {
    RunLog *r = arg;
    if (r->log) {
        fprintf(r->log, "%s: error: %s\n", check_context(), msg);
        fflush(r->log);
    }
    if (!r->events) return;
    runlog_error(r, msg);
    if (!r->ended) runlog_end(r, "error", r->steps_logged);
}

void runlog_open(RunLog *r, const char *lab, int rank, int world, const char *dir) {
    memset(r, 0, sizeof *r);
    snprintf(r->lab, sizeof r->lab, "%s", lab);
    r->rank = rank;
    r->world = world;
    sb_init(&r->line);
    if (!dir || !*dir) dir = getenv("SHARDLAB_RUN_DIR");
    if (dir && *dir) {
        if (strlen(dir) >= sizeof r->dir - 32) die(NULL, "run directory path too long: '%s'", dir);
        snprintf(r->dir, sizeof r->dir, "%s", dir);
        runlog_make_dirs(r->dir);
    } else {
        runlog_new_dir(r->dir, sizeof r->dir, lab);
    }
    char path[sizeof r->dir + 32];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", r->dir, rank);
    r->events = fopen_check(path, "a");
    const char *captured = getenv("SHARDLAB_LOG_CAPTURED");
    if (!captured || !*captured) {
        snprintf(path, sizeof path, "%s/rank-%d.log", r->dir, rank);
        r->log = fopen_check(path, "a");
    }
    check_on_die(on_die, r);
}

void runlog_close(RunLog *r) {
    check_forget_die(on_die, r);
    if (r->events) fclose_check(r->events, "the event log");
    if (r->log) fclose_check(r->log, "the rank log");
    sb_free(&r->line);
    r->events = r->log = NULL;
}

void runlog_printf(RunLog *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (r->log) {
        va_start(ap, fmt);
        vfprintf(r->log, fmt, ap);
        va_end(ap);
        fflush(r->log);
    }
}

// Write text to path via a temporary file and rename, so readers never see half a file.
static void write_file_atomic(const RunLog *r, const char *name, const char *text) {
    char path[sizeof r->dir + 64], tmp[sizeof r->dir + 80];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    StrBuf sb;
    sb_init(&sb);
    sb_append(&sb, text, strlen(text));
    sb_json_quote_nonfinite(&sb);  // as every event line (the schema)
    FILE *f = fopen_check(tmp, "w");
    fwrite_check(sb.data, 1, sb.len, f, name);
    fwrite_check("\n", 1, 1, f, name);
    fclose_check(f, name);
    sb_free(&sb);
    if (rename(tmp, path) != 0) die(NULL, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
}

void runlog_meta(RunLog *r, int argc, char **argv, const char *device, const char *backend,
                 const char *config_json) {
    if (r->rank != 0) return;
    StrBuf sb;
    sb_init(&sb);
    sb_printf(&sb, "{\"lab\":");
    sb_json_string(&sb, r->lab);
    sb_printf(&sb, ",\"argv\":[");
    for (int i = 0; i < argc; i++) {
        if (i) sb_append(&sb, ",", 1);
        sb_json_string(&sb, argv[i]);
    }
    int64_t now = runlog_now_us();
    time_t secs = (time_t)(now / 1000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char iso[32], host[256] = "unknown";
    strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
    gethostname(host, sizeof host - 1);
    sb_printf(&sb, "],\"world_size\":%d,\"device\":", r->world);
    sb_json_string(&sb, device);
    sb_printf(&sb, ",\"backend\":");
    sb_json_string(&sb, backend);
    sb_printf(&sb, ",\"config\":%s,\"start_time\":\"%s\",\"start_unix_us\":%lld,\"host\":", config_json, iso,
              (long long)now);
    sb_json_string(&sb, host);
    sb_printf(&sb, ",\"pid\":%d}", (int)getpid());
    write_file_atomic(r, "meta.json", sb.data);
    sb_free(&sb);
}

// ,"device_mem":{...} when the device has its own figure (a GPU).
static void device_mem(RunLog *r) {
    size_t free_bytes, total_bytes;
    if (r->dev && device_mem_info(r->dev, &free_bytes, &total_bytes) == 0)
        sb_printf(&r->line, ",\"device_mem\":{\"free\":%zu,\"total\":%zu}", free_bytes, total_bytes);
}

void runlog_start(RunLog *r, const Device *dev, const char *backend, uint64_t params,
                  const char *config_json, double loss_floor) {
    r->dev = dev;
    begin_event(r, "start");
    sb_printf(&r->line, ",\"world\":%d,\"lab\":", r->world);
    sb_json_string(&r->line, r->lab);
    sb_printf(&r->line, ",\"device\":");
    sb_json_string(&r->line, dev->name);
    device_mem(r);
    sb_printf(&r->line, ",\"backend\":");
    sb_json_string(&r->line, backend);
    sb_printf(&r->line, ",\"params\":%llu,\"config\":%s,\"loss_floor\":", (unsigned long long)params, config_json);
    if (loss_floor < 0) sb_printf(&r->line, "null}");
    else sb_printf(&r->line, "%.9g}", loss_floor);
    write_line(r);
}

void runlog_step(RunLog *r, const StepRecord *s) {
    begin_event(r, "step");
    sb_printf(&r->line, ",\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"tokens\":%lld", (long long)s->step, s->loss,
              s->lr, (long long)s->tokens);
    sb_printf(&r->line, ",\"ms\":{\"step\":%.3f,\"work\":%.3f,\"compute\":%.3f,\"comm\":%.3f}", s->ms_step,
              s->ms_work, s->ms_compute, s->ms_comm);
    sb_printf(&r->line, ",\"bytes\":{\"sent\":%llu,\"recv\":%llu}", (unsigned long long)s->bytes_sent,
              (unsigned long long)s->bytes_recv);
    sb_printf(&r->line, ",\"mem\":{");
    for (int c = 0; c < MEM_CATEGORIES; c++)
        sb_printf(&r->line, "\"%s\":%zu,", mem_category_name((MemCategory)c), mem_in_use(s->mem, (MemCategory)c));
    if (s->host_mem) sb_printf(&r->line, "\"host\":%zu,", mem_total(s->host_mem));
    sb_printf(&r->line, "\"peak\":%zu}", mem_peak(s->mem));
    sb_printf(&r->line, ",\"peak_by\":{");
    for (int c = 0; c < MEM_CATEGORIES; c++)
        sb_printf(&r->line, "%s\"%s\":%zu", c ? "," : "", mem_category_name((MemCategory)c),
                  mem_peak_in(s->mem, (MemCategory)c));
    sb_printf(&r->line, "}");
    sb_printf(&r->line, ",\"param_hash\":\"%016llx\",\"grad_norm\":%.9g", (unsigned long long)s->param_hash,
              s->grad_norm);
    if (s->extra && *s->extra) sb_printf(&r->line, ",%s", s->extra);
    sb_append(&r->line, "}", 1);
    write_line(r);
    r->steps_logged = s->step;
    r->step_events++;

    // A non-finite loss or gradient norm: the weights are (or are about to be) NaN, and every
    // later step would only repeat it. Stop here, saying where and what. At the run's first
    // step no update has happened yet: the weights it started from, or a kernel, made it.
    const struct {
        const char *what;
        double v;
    } logged[] = {{"the loss", s->loss}, {"the gradient norm", s->grad_norm}, {"the learning rate", s->lr}};
    for (int i = 0; i < 3; i++) {
        if (isfinite(logged[i].v)) continue;
        const char *what = logged[i].what, *value = isnan(logged[i].v) ? "NaN" : logged[i].v > 0 ? "infinite" : "-infinite";
        if (r->step_events == 1)
            die("check the weights given with --init or --resume, or the forward and backward kernels",
                "step %lld: %s is %s before any update: the starting weights or a kernel produce it", (long long)s->step,
                what, value);
        die("lower --lr (or raise --warmup); keep --clip on",
            "step %lld: %s is %s: the training diverged; lower --lr or raise --warmup", (long long)s->step, what, value);
    }
}

void runlog_span(RunLog *r, int64_t step, const char *name, int mb, int layer, int64_t t0_us,
                 int64_t t1_us, uint64_t bytes) {
    runlog_span_extra(r, step, name, mb, layer, t0_us, t1_us, bytes, NULL);
}

void runlog_span_extra(RunLog *r, int64_t step, const char *name, int mb, int layer, int64_t t0_us,
                       int64_t t1_us, uint64_t bytes, const char *extra) {
    begin_event(r, "span");
    sb_printf(&r->line, ",\"step\":%lld,\"name\":\"%s\",\"mb\":%d,\"layer\":%d,\"t0_us\":%lld,\"t1_us\":%lld,\"bytes\":%llu",
              (long long)step, name, mb, layer, (long long)t0_us, (long long)t1_us, (unsigned long long)bytes);
    if (extra && *extra) sb_printf(&r->line, ",%s", extra);
    sb_append(&r->line, "}", 1);
    write_line(r);
}

void runlog_check(RunLog *r, const char *name, int ok, double value, double expect) {
    begin_event(r, "check");
    sb_printf(&r->line, ",\"name\":");
    sb_json_string(&r->line, name);
    sb_printf(&r->line, ",\"ok\":%s,\"value\":%.17g,\"expect\":%.17g}", ok ? "true" : "false", value, expect);
    write_line(r);
}

int runlog_self_check(RunLog *r, const char *name, int ok, double value, double expect, const char *fmt, ...) {
    runlog_check(r, name, ok, value, expect);
    if (ok) return 1;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    runlog_printf(r, "warning: rank %d: %s (check %s); the run goes on: `shardlab grade` judges it\n", r->rank, what,
                  name);
    return 0;
}

void runlog_end(RunLog *r, const char *status, int64_t steps) {
    begin_event(r, "end");
    sb_printf(&r->line, ",\"status\":\"%s\",\"steps\":%lld", status, (long long)steps);
    device_mem(r);
    sb_append(&r->line, "}", 1);
    write_line(r);
    r->ended = 1;
}

void runlog_error(RunLog *r, const char *msg) {
    begin_event(r, "error");
    sb_printf(&r->line, ",\"msg\":");
    sb_json_string(&r->line, msg);
    sb_append(&r->line, "}", 1);
    write_line(r);
}

void runlog_summary(RunLog *r, const char *summary_json) {
    if (r->rank == 0) write_file_atomic(r, "summary.json", summary_json);
}
