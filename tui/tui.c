// tui.c — the terminal side of the dashboard: ncurses, keys, the pager, `shardlab tui`.
#define NCURSES_WIDECHAR 1
#include "tui.h"

#include <curses.h>
#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "canvas.h"
#include "command/course/course.h"
#include "command/runs/runread.h"
#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "common/runfiles/runlog.h"
#include "dashboard.h"
#include "mdterm.h"

#define FRAME_US 100000      // at most ten frames a second
#define IDLE_FRAME_US 1000000  // with nothing new, once a second (the clock, "stalled")
#define MESSAGE_US 5000000   // how long a key's answer stays in the footer
#define LOG_TAIL 16384       // bytes of a rank's output the log panel reads

static const char *TUI_USAGE =
    "usage: shardlab tui [RUN_DIR] [--ref DIR] [--panel P] [--no-color] [--ascii]\n"
    "       shardlab tui [RUN_DIR] --dump [--width W] [--height H] [--panel P]\n"
    "\n"
    "Shows a run live while it runs, or as it ended: the loss against the floor, step time\n"
    "split into compute and communication, memory by category, the last step's timeline.\n"
    "RUN_DIR defaults to the newest run under $SHARDLAB_RUNS (default runs/).\n"
    "  --ref DIR      draw another run's loss curve (e.g. the single-rank run) beside this one\n"
    "  --panel P      open on overview, memory, timeline or log (or 1-4)\n"
    "  --no-color     bars and timeline in letters (also when NO_COLOR is set)\n"
    "  --ascii        no braille or block characters\n"
    "  --dump         print one frame as text and exit (no terminal needed); W x H default 100x32\n"
    "Keys: 1-4/tab panels, p pause, l lexicon entry, r next rank's output (log), ? help, q quit.\n"
    "Quitting never stops the run. Exit status: 0, or 2 for bad arguments or no run there.\n";

struct Tui {
    RunView view;
    DashState state;
    Canvas canvas;
    SCREEN *screen;
    char root[PATH_MAX];        // the project's root, where lexicon/ is
    char message[256];
    int64_t message_until_us, last_frame_us;
    int dirty;
    pid_t pager;                // a pager we started, until it exits
    StrBuf log_text;
};

static Tui *active;  // the dashboard holding the terminal, for tui_restore_terminal()

// ---------------------------------------------------------------------------------------
// Colours and the frame
// ---------------------------------------------------------------------------------------

// What each named colour is on the terminal.
static short terminal_color(int c) {
    switch (c) {
    case COLOR_TITLE: case COLOR_LOSS: case COLOR_P2P: return COLOR_CYAN;
    case COLOR_OK: case COLOR_FWD: return COLOR_GREEN;
    case COLOR_BAD: case COLOR_SHARD: return COLOR_RED;
    case COLOR_WARN: case COLOR_FLOOR: case COLOR_RECOMPUTE: case COLOR_ACROSS: return COLOR_YELLOW;
    case COLOR_REF: case COLOR_ALL_REDUCE: return COLOR_MAGENTA;
    case COLOR_BWD: return COLOR_BLUE;
    case COLOR_MEM0 + 0: return COLOR_BLUE;      // params
    case COLOR_MEM0 + 1: return COLOR_GREEN;     // grads
    case COLOR_MEM0 + 2: return COLOR_YELLOW;    // optim
    case COLOR_MEM0 + 3: return COLOR_MAGENTA;   // acts
    case COLOR_MEM0 + 4: return COLOR_CYAN;      // comm
    case COLOR_MEM0 + 5: return COLOR_RED;       // a lab's own (host, ...)
    default: return -1;                          // the terminal's own
    }
}

static void start_colors(Tui *t) {
    if (!t->state.color) return;
    start_color();
    use_default_colors();
    for (int c = 1; c < COLOR_COUNT; c++) init_pair((short)c, terminal_color(c), -1);
}

static void blit(Tui *t) {
    const Canvas *c = &t->canvas;
    for (int y = 0; y < c->h; y++)
        for (int x = 0; x < c->w; x++) {
            const Cell *cell = &c->cells[y * c->w + x];
            wchar_t wc[2] = {(wchar_t)cell->ch, 0};
            attr_t attr = (cell->attr & ATTR_BOLD ? A_BOLD : 0) | (cell->attr & ATTR_REVERSE ? A_REVERSE : 0);
            if (cell->color == COLOR_DIM) attr |= A_DIM;
            cchar_t cc;
            setcchar(&cc, wc, attr, t->state.color ? (short)cell->color : 0, NULL);
            mvadd_wch(y, x, &cc);  // the bottom-right cell may answer ERR (it would scroll): harmless
        }
    refresh();
}

// The last LOG_TAIL bytes of rank r's output in dir, from a whole line on, into out.
static void read_log_tail(const char *dir, int rank, StrBuf *out) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%d.log", dir, rank);
    sb_reset(out);
    sb_append(out, "", 0);
    int fd = file_open_regular(path);  // (json.h: a FIFO in its place would block here)
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0) {
        off_t from = st.st_size > LOG_TAIL ? st.st_size - LOG_TAIL : 0;
        char buf[LOG_TAIL];
        ssize_t got = pread(fd, buf, sizeof buf, from);
        size_t skip = 0;
        if (got > 0 && from > 0)  // drop the cut first line
            while (skip < (size_t)got && buf[skip++] != '\n') {}
        // A progress line rewritten with \r shows its last version; other control bytes go.
        for (ssize_t i = (ssize_t)skip; i < got; i++) {
            char ch = buf[i];
            if (ch == '\r') {
                while (out->len > 0 && out->data[out->len - 1] != '\n') out->len--;
                out->data[out->len] = 0;
            } else if (ch == '\n' || ch == '\t' || (unsigned char)ch >= 0x20) {
                sb_append(out, ch == '\t' ? " " : &ch, 1);
            }
        }
    }
    close(fd);
}

static void draw(Tui *t, int64_t now_us) {
    t->state.now_us = now_us;
    t->state.message = t->message[0] && now_us < t->message_until_us ? t->message : NULL;
    // The log panel shows a rank's output; so does the overview until the first step.
    if (t->state.panel == PANEL_LOG || (t->state.panel == PANEL_OVERVIEW && t->view.nloss == 0))
        read_log_tail(t->view.dir, t->state.log_rank, &t->log_text);
    t->state.log_text = t->log_text.data;
    dash_render(&t->canvas, &t->view, &t->state);
    blit(t);
    t->last_frame_us = now_us, t->dirty = 0;
}

static void say(Tui *t, int64_t now_us, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(Tui *t, int64_t now_us, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->message, sizeof t->message, fmt, ap);
    va_end(ap);
    t->message_until_us = now_us + MESSAGE_US, t->dirty = 1;
}

// ---------------------------------------------------------------------------------------
// The lexicon key: lexicon/<slug>.md in a pager
// ---------------------------------------------------------------------------------------

void tui_find_root(char *out, size_t n) {
    const char *env = getenv("SHARDLAB_ROOT");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    snprintf(out, n, ".");
    if (k <= 0) return;
    exe[k] = 0;
    for (int up = 0; up < 4; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return;
        *slash = 0;
        char probe[PATH_MAX + 16];
        snprintf(probe, sizeof probe, "%s/labs/common", exe[0] ? exe : "/");
        if (access(probe, F_OK) == 0) {
            snprintf(out, n, "%s", exe[0] ? exe : "/");
            return;
        }
    }
}

// The pager runs in its own process group in the foreground of the terminal, so Ctrl-C in
// it reaches the pager only, not us (and not the run we watch). tui_tick() waits for it. It
// reads the entry rendered for the terminal on its stdin.
static void open_lexicon(Tui *t, int64_t now_us) {
    const CatLab *lab = catalog_lab(t->view.lab);  // (the catalog names each lab's entry)
    const char *slug = lab ? lab->lexicon : NULL;
    if (!slug) {
        say(t, now_us, "no lexicon entry is linked to lab '%s'", t->view.lab[0] ? t->view.lab : "?");
        return;
    }
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/lexicon/%s.md", t->root, slug);
    if (access(path, R_OK) != 0) {
        say(t, now_us, "the lexicon entry for %s is not there yet (%s): it comes with the lexicon", t->view.lab, path);
        return;
    }
    def_prog_mode();
    endwin();
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        reset_prog_mode();
        say(t, now_us, "cannot start a pager: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGTTOU, SIG_IGN);
        if (isatty(STDIN_FILENO)) tcsetpgrp(STDIN_FILENO, getpid());
        signal(SIGTTOU, SIG_DFL), signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL), signal(SIGPIPE, SIG_DFL);
        // The entry rendered for the terminal (mdterm.h, plain: any pager shows it), piped to
        // the pager; the pager reads its keys from the terminal.
        StrBuf md, text;
        sb_init(&md), sb_init(&text);
        sb_read_file(&md, path, (size_t)1 << 20);
        Lexicon lx;
        char dir[PATH_MAX + 16], err[256];
        snprintf(dir, sizeof dir, "%s/lexicon", t->root);
        int have = lexicon_load(&lx, dir, err, sizeof err) == 0;
        MdTermOptions o = {.width = COLS > 100 ? 100 : COLS, .link_name = have ? lexicon_link_name : NULL, .link_ctx = &lx};
        if (mdterm_render(md.data ? md.data : "", md.len, &o, &text) != 0) sb_printf(&text, "%s", md.data ? md.data : "");
        int fd[2];
        if (pipe(fd) != 0) _exit(127);
        pid_t pager_pid = fork();
        if (pager_pid == 0) {
            dup2(fd[0], STDIN_FILENO);
            close(fd[0]), close(fd[1]);
            const char *pager = getenv("PAGER");
            execl("/bin/sh", "sh", "-c", "exec ${1:-less}", "sh", pager && *pager ? pager : "less", (char *)NULL);
            _exit(127);
        }
        close(fd[0]);
        for (size_t off = 0; off < text.len;) {
            ssize_t w = write(fd[1], text.data + off, text.len - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd[1]);
        int status = 0;
        waitpid(pager_pid, &status, 0);
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    setpgid(pid, pid);
    t->pager = pid;
}

static void pager_done(Tui *t, int status, int64_t now_us) {
    t->pager = 0;
    void (*old)(int) = signal(SIGTTOU, SIG_IGN);  // we are in the background until this call
    if (isatty(STDIN_FILENO)) tcsetpgrp(STDIN_FILENO, getpgrp());
    signal(SIGTTOU, old);
    reset_prog_mode();
    clearok(curscr, TRUE);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) say(t, now_us, "the pager could not run: set PAGER (e.g. PAGER=less)");
    t->dirty = 1;
}

// ---------------------------------------------------------------------------------------
// The session
// ---------------------------------------------------------------------------------------

Tui *tui_open(const char *run_dir, const TuiOptions *o, char *err, size_t errlen) {
    Tui *t = calloc_check(1, sizeof *t);
    if (runview_open(&t->view, run_dir, err, errlen) != 0) {  // the run first: the likelier mistake
        free(t);
        return NULL;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        snprintf(err, errlen, "the dashboard needs a terminal (stdin and stdout); use --dump to print one frame");
        runview_free(&t->view);
        free(t);
        return NULL;
    }
    if (o->ref && runview_set_reference(&t->view, o->ref, err, errlen) != 0) {
        runview_free(&t->view);
        free(t);
        return NULL;
    }
    setlocale(LC_ALL, "");
    const char *term = getenv("TERM");
    t->screen = term && *term && strcmp(term, "dumb") != 0 ? newterm(NULL, stdout, stdin) : NULL;
    if (!t->screen) {
        snprintf(err, errlen, "cannot drive this terminal (TERM=%s); set TERM (e.g. xterm-256color) or use --ui none",
                 term ? term : "");
        runview_free(&t->view);
        free(t);
        return NULL;
    }
    active = t;
    const char *no_color = getenv("NO_COLOR");
    t->state.utf8 = !o->ascii && strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
    t->state.color = o->color >= 0 ? o->color && has_colors() : has_colors() && !(no_color && *no_color);
    t->state.attached = o->attached;
    t->state.panel = o->panel >= 0 && o->panel < PANEL_COUNT ? (Panel)o->panel : PANEL_OVERVIEW;
    start_colors(t);
    cbreak(), noecho(), keypad(stdscr, TRUE), nodelay(stdscr, TRUE), curs_set(0);
    set_escdelay(25);
    canvas_init(&t->canvas, COLS, LINES);
    sb_init(&t->log_text);
    tui_find_root(t->root, sizeof t->root);
    t->dirty = 1;
    return t;
}

// Returns 1 on a quit key.
static int handle_key(Tui *t, int ch, int64_t now_us) {
    DashState *s = &t->state;
    t->dirty = 1;
    if (ch == KEY_RESIZE) {
        canvas_free(&t->canvas);
        canvas_init(&t->canvas, COLS, LINES);
        clear();
        return 0;
    }
    if (s->help) {  // any key closes the help; q still quits
        s->help = 0;
        return ch == 'q' || ch == 'Q';
    }
    switch (ch) {
    case 'q': case 'Q': return 1;
    case 'p': case 'P':
        s->paused = !s->paused;
        say(t, now_us, s->paused ? "view paused: the run goes on; p to catch up" : "view live again");
        break;
    case '\t': s->panel = (Panel)((s->panel + 1) % PANEL_COUNT); break;
    case KEY_BTAB: s->panel = (Panel)((s->panel + PANEL_COUNT - 1) % PANEL_COUNT); break;
    case '1': case '2': case '3': case '4': s->panel = (Panel)(ch - '1'); break;
    case '?': case 'h': s->help = 1; break;
    case 'l': case 'L': open_lexicon(t, now_us); break;
    case 'r': case 'R': {
        int world = runview_world(&t->view);
        s->log_rank = world > 0 ? (s->log_rank + 1) % world : 0;
        if (s->panel != PANEL_LOG) say(t, now_us, "rank %d's output is on the log panel (4)", s->log_rank);
        break;
    }
    case ERR: break;
    default: say(t, now_us, "key not bound: ? lists the keys"); break;
    }
    return 0;
}

// The terminal was closed (a hung-up terminal polls as POLLHUP, or as an error).
static int terminal_gone(void) {
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

int tui_tick(Tui *t, int64_t now_us) {
    if (terminal_gone()) return TUI_HANGUP;
    if (t->pager) {  // the pager has the terminal: only wait for it
        int status;
        if (waitpid(t->pager, &status, WNOHANG) == t->pager) pager_done(t, status, now_us);
        else return 0;
    }
    int quit = 0;
    for (int ch, keys = 0; !quit && keys < 64 && (ch = getch()) != ERR; keys++) quit = handle_key(t, ch, now_us);
    if (quit) return TUI_QUIT;
    if (t->pager) return 0;
    // Keys every tick; the files and the screen at most once a frame.
    int64_t since = now_us - t->last_frame_us;
    if (since < FRAME_US) return 0;
    if (!t->state.paused && runview_poll(&t->view, now_us)) t->dirty = 1;
    if (t->dirty || since >= IDLE_FRAME_US) draw(t, now_us);
    return 0;
}

int tui_wait_quit(Tui *t, const char *why, volatile sig_atomic_t *signals) {
    sig_atomic_t seen = *signals;
    t->state.paused = 0;
    while (*signals == seen) {
        int64_t now = runlog_now_us();
        // A key's answer keeps its few seconds; then, and from then on, the way out.
        if (!t->message[0] || now >= t->message_until_us) say(t, now, "%s", why);
        if (strcmp(t->message, why) == 0) t->message_until_us = now + MESSAGE_US;
        int done = tui_tick(t, now);
        if (done) return done;
        usleep(20000);
    }
    return 0;
}

void tui_restore_terminal(void) {
    if (active && active->screen) endwin();
}

void tui_close(Tui *t) {
    if (!t) return;
    if (t->pager) {  // do not leave a pager holding the terminal, nor anything it started
        // The group goes as a whole: the process we forked and the pager it runs. A pager
        // may ignore SIGTERM, so SIGKILL follows; we reap ours only after that, as its pid,
        // which names the group, stays ours until then.
        kill(-t->pager, SIGTERM);
        kill(-t->pager, SIGCONT);
        siginfo_t info;
        for (int i = 0; i < 25; i++) {
            info.si_pid = 0;
            if (waitid(P_PID, (id_t)t->pager, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid) break;
            usleep(20000);
        }
        kill(-t->pager, SIGKILL);
        int status;
        waitpid(t->pager, &status, 0);
        pager_done(t, status, 0);
    }
    endwin();
    delscreen(t->screen);
    if (active == t) active = NULL;
    canvas_free(&t->canvas);
    runview_free(&t->view);
    sb_free(&t->log_text);
    free(t);
}

// ---------------------------------------------------------------------------------------
// `shardlab tui`
// ---------------------------------------------------------------------------------------

static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

static int parse_panel(const char *text) {
    for (int p = 0; p < PANEL_COUNT; p++)
        if (strcmp(text, dash_panel_name((Panel)p)) == 0) return p;
    if (text[0] >= '1' && text[0] <= '4' && !text[1]) return text[0] - '1';
    usage_error("shardlab tui", "--panel %s: expected overview, memory, timeline or log (or 1-4)", text);
}

static int parse_size(const char *opt, const char *text, int lo, int hi) {
    char *end;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || end == text || *end || errno || v < lo || v > hi)
        usage_error("shardlab tui", "%s %s: expected a number from %d to %d", opt, text ? text : "(missing)", lo, hi);
    return (int)v;
}

static int dump(const char *dir, const TuiOptions *o, int w, int h) {
    RunView v;
    char err[512];
    if (runview_open(&v, dir, err, sizeof err) != 0) usage_error("shardlab tui", "%s", err);
    if (o->ref && runview_set_reference(&v, o->ref, err, sizeof err) != 0) usage_error("shardlab tui", "--ref %s", err);
    setlocale(LC_ALL, "");
    DashState s = {.panel = (Panel)o->panel, .utf8 = !o->ascii && strcmp(nl_langinfo(CODESET), "UTF-8") == 0,
                   .color = 0, .now_us = 0, .dump = 1};
    StrBuf sb, log;
    sb_init(&sb), sb_init(&log);
    if (s.panel == PANEL_LOG || (s.panel == PANEL_OVERVIEW && v.nloss == 0)) read_log_tail(v.dir, 0, &log), s.log_text = log.data;
    Canvas c;
    canvas_init(&c, w, h);
    dash_render(&c, &v, &s);
    canvas_to_text(&c, &sb);
    fwrite(sb.data, 1, sb.len, stdout);
    sb_free(&sb), sb_free(&log);
    canvas_free(&c);
    runview_free(&v);
    return 0;
}

int tui_main(int argc, char **argv) {
    const char *prog = "shardlab tui", *dir = NULL;
    TuiOptions o = {.color = -1, .panel = 0};
    int want_dump = 0, w = 100, h = 32;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return fputs(TUI_USAGE, stdout), 0;
        else if (strcmp(a, "--ref") == 0) {
            if (!val) usage_error(prog, "--ref needs a run directory");
            o.ref = val, i++;
        } else if (strcmp(a, "--panel") == 0) {
            if (!val) usage_error(prog, "--panel needs overview, memory, timeline or log");
            o.panel = parse_panel(val), i++;
        } else if (strcmp(a, "--width") == 0) w = parse_size(a, val, DASH_MIN_W, 1000), i++;
        else if (strcmp(a, "--height") == 0) h = parse_size(a, val, DASH_MIN_H, 1000), i++;
        else if (strcmp(a, "--no-color") == 0) o.color = 0;
        else if (strcmp(a, "--ascii") == 0) o.ascii = 1;
        else if (strcmp(a, "--dump") == 0) want_dump = 1;
        else if (a[0] == '-') usage_error(prog, "unknown option '%s'", a);
        else if (dir) usage_error(prog, "one run directory at a time ('%s' and '%s')", dir, a);
        else dir = a;
    }
    char latest[4096], err[512];
    if (!dir) {
        const char *runs = getenv("SHARDLAB_RUNS");
        if (runview_latest_run(runs && *runs ? runs : "runs", latest, sizeof latest, err, sizeof err) != 0)
            usage_error(prog, "%s", err);
        dir = latest;
    }
    if (want_dump) return dump(dir, &o, w, h);
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL), sigaction(SIGTERM, &sa, NULL), sigaction(SIGHUP, &sa, NULL);
    Tui *t = tui_open(dir, &o, err, sizeof err);
    if (!t) usage_error(prog, "%s", err);
    int done = 0;
    while (!stop_signal && !(done = tui_tick(t, runlog_now_us()))) usleep(20000);
    tui_close(t);
    if (done == TUI_HANGUP) stop_signal = SIGHUP;  // as if the terminal had said so
    return stop_signal ? 128 + stop_signal : 0;
}
