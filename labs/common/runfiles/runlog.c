// runlog.c — see runlog.h; the schema it writes is labs/DESIGN.md, Events.
#include "runlog.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/harness/check.h"
#include "common/model/rng.h"

int64_t runlog_now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

int runlog_check_path(const char *what, const char *path, size_t room, StrBuf *why) {
    size_t len = strlen(path), most = PATH_MAX - 1 - room;
    if (len > most) {
        sb_printf(why, "%s: the path is %zu bytes long; at most %zu fit (PATH_MAX %d, less %zu for the paths inside it)",
                  what, len, most, PATH_MAX, room);
        return -1;
    }
    for (const char *p = path; *p;) {
        size_t part = strcspn(p, "/");
        if (part > NAME_MAX) {
            sb_printf(why, "%s: its part '%.40s...' is %zu bytes long; a name takes at most %d (NAME_MAX)", what, p, part,
                      NAME_MAX);
            return -1;
        }
        p += part + (p[part] == '/');
    }
    return 0;
}

int runlog_try_make_dirs(const char *path, char *failed, size_t n) {
    char *buf = strdup(path);  // (whatever its length: mkdir says ENAMETOOLONG itself)
    if (!buf) return snprintf(failed, n, "%s", path), errno = ENOMEM, -1;
    for (char *p = buf + 1;; p++) {
        if (*p && *p != '/') continue;
        char c = *p;
        *p = 0;
        struct stat st;
        if (mkdir(buf, 0755) != 0 && (errno != EEXIST || stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))) {
            int e = errno == EEXIST ? ENOTDIR : errno;
            snprintf(failed, n, "%s", buf);
            free(buf);
            errno = e;
            return -1;
        }
        if (!(*p = c)) return free(buf), 0;
    }
}

void runlog_make_dirs(const char *path) {
    char failed[PATH_MAX];
    if (runlog_try_make_dirs(path, failed, sizeof failed) != 0)
        die("check the path and its permissions", "cannot create directory '%s': %s", failed, strerror(errno));
}

// ---- one job per run directory ----------------------------------------------------------

// The files a run, its grade and its trace write into a run directory, by name: what
// --overwrite removes. Folders: the replay points, the checkpoints, the grader's references.
static int run_file(const char *name, int *tree) {
    static const char *const exact[] = {"meta.json",  "summary.json", "grade.json",
                                        "grade.xml",  "trace.json",   "dataset.bin"};
    static const char *const prefix[] = {"rank-",          "reads-rank-",      "indices-rank-", "optim-rank-",
                                         "meta.json.tmp.", "summary.json.tmp.", "grade.json.tmp", "grade.xml.tmp"};
    *tree = !strcmp(name, "replay") || !strcmp(name, "checkpoints") || !strncmp(name, "ref-", 4);
    if (*tree) return 1;
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (!strcmp(name, exact[i])) return 1;
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
        if (!strncmp(name, prefix[i], strlen(prefix[i]))) return 1;
    return 0;
}

// How rank 0's log in dir ends: 1 an end event saying ok, -1 one saying something else, 0 none
// (its last 64 KiB are read: an end event is the last line).
static int rank0_ending(const char *dir) {
    StrBuf path;
    sb_init(&path);
    sb_printf(&path, "%s/rank-0.jsonl", dir);
    int fd = file_open_regular(path.data), ending = 0;
    sb_free(&path);
    struct stat st;
    static char tail[1 << 16];
    if (fd >= 0 && fstat(fd, &st) == 0) {
        off_t from = st.st_size > (off_t)sizeof tail - 1 ? st.st_size - (off_t)sizeof tail + 1 : 0;
        ssize_t got = pread(fd, tail, sizeof tail - 1, from);
        tail[got > 0 ? got : 0] = 0;
        const char *end = NULL;
        for (const char *p = tail; (p = strstr(p, "{\"ev\":\"end\"")); p++) end = p;
        if (end) ending = memmem(end, strcspn(end, "\n"), "\"status\":\"ok\"", 13) ? 1 : -1;
    }
    if (fd >= 0) close(fd);
    return ending;
}

// What of a run dir holds: "" if none (a new folder, or only the rank logs of options that a
// lab refused), else which run: "a finished run", "an earlier run that ended in error", ...
static const char *run_there(const char *dir) {
    DIR *d = opendir(dir);
    int meta = 0, summary = 0, events = 0;
    StrBuf path;
    sb_init(&path);
    for (struct dirent *e; d && (e = readdir(d));) {
        int r, end = 0;
        meta |= !strcmp(e->d_name, "meta.json");
        summary |= !strcmp(e->d_name, "summary.json");
        if (sscanf(e->d_name, "rank-%d.jsonl%n", &r, &end) == 1 && end && !e->d_name[end]) {
            struct stat st;
            sb_reset(&path);
            sb_printf(&path, "%s/%s", dir, e->d_name);
            events |= lstat(path.data, &st) == 0 && (!S_ISREG(st.st_mode) || st.st_size > 0);
        }
    }
    if (d) closedir(d);
    sb_free(&path);
    if (!summary && !meta && !events) return "";
    int ending = rank0_ending(dir);
    return summary || ending > 0 ? "a finished run" : ending < 0 ? "an earlier run that ended in error"
                                                                 : "an earlier run that did not finish";
}

static int remove_run(const char *dir, StrBuf *why) {
    DIR *d = opendir(dir);
    if (!d) return sb_printf(why, "--overwrite: cannot read %s: %s", dir, strerror(errno)), -1;
    StrBuf path;
    sb_init(&path);
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int tree;
        if (!run_file(e->d_name, &tree)) continue;
        sb_reset(&path);
        sb_printf(&path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (tree && lstat(path.data, &st) == 0 && S_ISDIR(st.st_mode)) file_remove_tree(path.data);
        else if (unlink(path.data) != 0 && errno != ENOENT) rc = -1;
        if (rc == 0 && access(path.data, F_OK) == 0) rc = -1;
        if (rc) {
            sb_printf(why, "--overwrite: cannot remove %s: %s", path.data, strerror(errno));
            break;
        }
    }
    closedir(d);
    sb_free(&path);
    return rc;
}

int runlog_hold_dir(JobLock *lock, const char *dir, int overwrite, char *const *argv, StrBuf *why, int *busy) {
    lock->fd = -1;
    *busy = 0;
    if (runlog_check_path("--run-dir", dir, RUNLOG_ROOM, why) != 0) return 2;
    char failed[PATH_MAX];
    if (runlog_try_make_dirs(dir, failed, sizeof failed) != 0)
        return sb_printf(why, "cannot create directory '%s': %s", failed, strerror(errno)), 1;
    if (joblock_take(lock, "the run directory", dir, 0, argv, why, busy) != 0) return 1;
    const char *there = run_there(dir);
    if (*there && !overwrite) {
        sb_printf(why, "--run-dir %s holds %s: give a new directory, or add --overwrite to replace that run", dir, there);
        joblock_release(lock);
        return 2;
    }
    if (*there && remove_run(dir, why) != 0) {
        joblock_release(lock);
        return 1;
    }
    return 0;
}

// <root>/<lab>-<YYYYmmdd-HHMMSS, UTC>-<4 hex>, a name no other run has: the one namer of run
// directories (the launcher's, a lab's started alone, the web's).
int runlog_try_new_dir(char *out, size_t n, const char *root, const char *lab, char *why, size_t whylen) {
    char failed[PATH_MAX];
    if (runlog_try_make_dirs(root, failed, sizeof failed) != 0)
        return snprintf(why, whylen, "cannot create directory '%s': %s", failed, strerror(errno)), -1;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned tag = (unsigned)(rng_hash((uint64_t)runlog_now_us(), (uint64_t)getpid(), (uint64_t)attempt) & 0xffff);
        StrBuf len_why;
        sb_init(&len_why);
        int cut = (size_t)snprintf(out, n, "%s/%s-%s-%04x", root, lab, stamp, tag) >= n;
        if (cut || runlog_check_path("the runs directory", out, RUNLOG_ROOM, &len_why) != 0) {
            snprintf(why, whylen, "%s", cut ? "a run directory's path there is too long for this program" : len_why.data);
            sb_free(&len_why);
            return -1;
        }
        sb_free(&len_why);
        if (mkdir(out, 0755) == 0) return 0;
        if (errno != EEXIST)
            return snprintf(why, whylen, "cannot create run directory '%s': %s", out, strerror(errno)), -1;
    }
    return snprintf(why, whylen, "could not find a free run directory name under '%s'", root), -1;
}

void runlog_new_dir(char *out, size_t n, const char *lab) {
    const char *root = getenv("SHARDLAB_RUNS");
    if (!root || !*root) root = "runs";
    StrBuf long_root;
    sb_init(&long_root);
    // (room for the run's own name, "<lab>-<YYYYmmdd-HHMMSS>-<4 hex>", and what goes in it)
    if (runlog_check_path("SHARDLAB_RUNS", root, RUNLOG_ROOM + 64, &long_root) != 0) usage_error(lab, "%s", long_root.data);
    sb_free(&long_root);
    char why[PATH_MAX + 256];
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
        StrBuf why;
        sb_init(&why);
        if (runlog_check_path("--run-dir", dir, RUNLOG_ROOM, &why) != 0) usage_error(lab, "%s", why.data);
        sb_free(&why);
        snprintf(r->dir, sizeof r->dir, "%s", dir);  // (it fits: checked)
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

void runlog_comm_span(RunLog *r, int64_t step, const char *name, int mb, int layer, int64_t t0_us, int64_t t1_us,
                      uint64_t bytes, int64_t waited_from_us, const char *extra) {
    char more[1024];
    if (waited_from_us > 0)
        snprintf(more, sizeof more, "%s%s\"waited_from_us\":%lld", extra ? extra : "", extra && *extra ? "," : "",
                 (long long)waited_from_us);
    runlog_span_extra(r, step, name, mb, layer, t0_us, t1_us, bytes, waited_from_us > 0 ? more : extra);
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
