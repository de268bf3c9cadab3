// web.c — the web server: start and stop, and the router, which sends each request through
// the checks (http.c) to a page or a static file (pages.c) or the API (api.c). See web.h (the
// routes, the API, and why the checks are what they are).
#include "web.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "command/course/course.h"
#include "common/harness/check.h"
#include "web_internal.h"

static Web *the_web;  // for the signal handler
Lexicon web_lexicon;   // loaded here, read by the pages (pages.c)

// ---------------------------------------------------------------------------------------
// The router

static int route(Web *w, struct mg_connection *c);

int web_route(struct mg_connection *c, void *cbdata) {
    web_body_read = 0;
    int status = route(cbdata, c);
    if (!web_body_read && web_has_body(c)) {  // (see web_body_read)
        int fd = web_socket(c);
        if (fd >= 0) shutdown(fd, SHUT_RD);
    }
    return status;
}

static int route(Web *w, struct mg_connection *c) {
    runs_reap();
    const struct mg_request_info *ri = mg_get_request_info(c);
    const char *raw = ri->local_uri_raw ? ri->local_uri_raw : ri->local_uri;
    // A header the checks below read, sent twice: CivetWeb gives the first, another server
    // or proxy might take the last, and the checks would pass on one the request did not mean.
    const char *twice = web_header_twice(c);
    if (twice) {
        char body[160];
        int n = snprintf(body, sizeof body, "the request has two %s headers: send it once\n", twice);
        web_reply(c, 400, "text/plain; charset=utf-8", body, (size_t)n, NULL);
        return 400;
    }
    if (!web_host_ok(w, c)) {
        const char *body = "this server answers only to its own name (127.0.0.1, localhost)\n";
        web_reply(c, 403, "text/plain; charset=utf-8", body, strlen(body), NULL);
        return 403;
    }
    // "..", in any spelling the decoder left, never reaches a file name.
    if (!raw || raw[0] != '/' || strstr(raw, "..") || strstr(ri->local_uri, "..") || strchr(raw, '\\')) return web_not_found(c);
    const char *u = ri->local_uri, *m = ri->request_method;
    if (strncmp(u, "/api/", 5) == 0) return web_api(w, c, m, u + 5, ri->query_string);
    if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
        web_reply(c, 405, "text/plain", "GET only\n", 9, "Allow: GET\r\n");
        return 405;
    }
    if (strcmp(u, "/") == 0 || strcmp(u, "/index.html") == 0) return web_page_home(w, c);
    if (strcmp(u, "/favicon.ico") == 0) {  // none: say so without an error in the console
        web_reply(c, 204, "image/x-icon", "", 0, NULL);
        return 204;
    }
    if (strncmp(u, "/static/", 8) == 0) return web_send_static(w, c, u + 8);
    if (strncmp(u, "/lexicon/", 9) == 0) return web_page_markdown(w, c, "lexicon", u + 9);
    if (strncmp(u, "/lessons/", 9) == 0) return web_page_markdown(w, c, "lessons", u + 9);
    if (strncmp(u, "/labs/", 6) == 0) return web_page_lab(w, c, u + 6);
    if (strcmp(u, "/plan") == 0) return web_page_plan(w, c, ri->query_string);
    if (strncmp(u, "/runs/", 6) == 0) return web_page_run(w, c, u + 6);
    if (strcmp(u, "/lexicon") == 0 || strcmp(u, "/lessons") == 0 || strcmp(u, "/labs") == 0 || strcmp(u, "/runs") == 0) {
        char loc[64];
        snprintf(loc, sizeof loc, "Location: /#%s\r\n", u + 1);
        web_reply(c, 302, "text/plain", "", 0, loc);
        return 302;
    }
    return web_not_found(c);
}

// ---------------------------------------------------------------------------------------
// Start and stop

static const char *WEB_USAGE =
    "usage: shardlab web [--host ADDR] [--port P] [--runs DIR] [--max-runs N] [--request-timeout S] [--checks DIR]\n"
    "\n"
    "The course in the browser: lessons, the lexicon, the labs, and runs live. Prints the URL to\n"
    "open, with this server's token (starting a lab from the browser needs it).\n"
    "  --host ADDR   the address to listen on (default 127.0.0.1: this machine only; anything\n"
    "                else is reachable from the network, and the server says so)\n"
    "  --port P      the port (default 8080; 0: any free one)\n"
    "  --runs DIR    the run directories (default $SHARDLAB_RUNS, else runs/)\n"
    "  --max-runs N  how many labs started from the browser may run at once (default 1, at most\n"
    "                32); one more is refused (429) with the run that holds the slot, and so is\n"
    "                one that would not fit in memory beside the runs going on\n"
    "  --request-timeout S   how long a client may take to send a request, body included\n"
    "                (default 30 seconds)\n"
    "  --checks DIR  make check's programs for a copy of the labs (make web builds them for LABS\n"
    "                and passes build/student/<hash>/todo): each lab's page lists the TODO regions\n"
    "                it runs, and its \"Check them\" button checks them there\n"
    "Ctrl-C stops it.\n";

// CivetWeb's own messages (why it cannot listen, a bad request): to stderr, once each. Why it
// could not bind is kept: when the server cannot start, it says so in its own words.
static char bind_error[512];

static int on_log(const struct mg_connection *c, const char *message) {
    (void)c;
    if (strstr(message, "cannot bind")) snprintf(bind_error, sizeof bind_error, "%s", message);
    fprintf(stderr, "shardlab web: civetweb: %s\n", message);
    return 1;
}

static void on_signal(int sig) {
    (void)sig;
    if (the_web) the_web->stopping = 1;
}

// --port 0: a port the system says is free now (CivetWeb wants a number), on loopback of the
// host's family (an IPv6 host: ::1).
static int free_port(int ipv6) {
    int fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT, .sin6_port = 0};
    struct sockaddr *sa = ipv6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a;
    socklen_t len = ipv6 ? sizeof a6 : sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, sa, len) == 0 && getsockname(fd, sa, &len) == 0) port = ntohs(ipv6 ? a6.sin6_port : a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static void make_token(char *out) {
    unsigned char r[16];
    int fd = open("/dev/urandom", O_RDONLY);
    ssize_t got = fd >= 0 ? read(fd, r, sizeof r) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof r) die("the system has no /dev/urandom", "cannot make a token");
    for (int i = 0; i < 16; i++) sprintf(out + 2 * i, "%02x", r[i]);
}

int web_main(int argc, char **argv, const char *root, const char *labs) {
    static Web w;
    snprintf(w.root, sizeof w.root, "%s", root);
    snprintf(w.labs, sizeof w.labs, "%s", labs);
    snprintf(w.host, sizeof w.host, "127.0.0.1");
    const char *runs = getenv("SHARDLAB_RUNS");
    snprintf(w.runs, sizeof w.runs, "%s", runs && *runs ? runs : "runs");
    w.port = 8080;
    w.request_timeout_s = 30;
    w.max_runs = 1;  // a lab on N ranks already takes every core of a laptop
    for (int i = 2; i < argc; i += 2) {  // every option takes a value: argv[i + 1]
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(WEB_USAGE, stdout), 0;
        if (!v) usage_error("shardlab web", "%s needs a value, or is not an option", a);
        if (!strcmp(a, "--host")) {
            size_t n = strlen(v);
            if (n > 2 && v[0] == '[' && v[n - 1] == ']') v++, n -= 2;  // [::1], as a URL writes it
            if (n == 0 || n >= sizeof w.host || strspn(v, "0123456789.abcdefghijklmnopqrstuvwxyz-:") < n)
                usage_error("shardlab web", "--host: '%s' is not an address", argv[i + 1]);
            snprintf(w.host, sizeof w.host, "%.*s", (int)n, v);
        } else if (!strcmp(a, "--port")) {
            char *end;
            long p = strtol(v, &end, 10);
            if (*end || end == v || p < 0 || p > 65535) usage_error("shardlab web", "--port must be 0 to 65535 (got '%s')", v);
            w.port = (int)p;
        } else if (!strcmp(a, "--request-timeout")) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || end == v || t < 1 || t > 3600)
                usage_error("shardlab web", "--request-timeout must be 1 to 3600 seconds (got '%s')", v);
            w.request_timeout_s = (int)t;
        } else if (!strcmp(a, "--max-runs")) {
            char *end;
            long m = strtol(v, &end, 10);
            if (*end || end == v || m < 1 || m > WEB_MAX_RUNS)
                usage_error("shardlab web", "--max-runs must be 1 to %d (got '%s')", WEB_MAX_RUNS, v);
            w.max_runs = (int)m;
        } else if (!strcmp(a, "--runs")) {
            snprintf(w.runs, sizeof w.runs, "%s", v);
        } else if (!strcmp(a, "--checks")) {
            // Kept as an absolute path: the driver is run by it, whatever the directory.
            struct stat st;
            char real[PATH_MAX], prog[PATH_MAX + 8];
            if (stat(v, &st) != 0 || !S_ISDIR(st.st_mode) || !realpath(v, real) || strlen(real) >= sizeof w.checks)
                usage_error("shardlab web", "--checks: '%s' is not a directory (make web builds make check's programs and "
                            "names their directory)", v);
            snprintf(prog, sizeof prog, "%s/check", real);
            if (access(prog, X_OK) != 0)
                usage_error("shardlab web", "--checks: %s has no check program (make check's driver: make web or make "
                            "check builds it there)", v);
            snprintf(w.checks, sizeof w.checks, "%s", real);
        } else {
            usage_error("shardlab web", "unknown option '%s'", a);
        }
    }
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) die(NULL, "cannot find this program's path");
    exe[k] = 0;
    snprintf(w.launcher, sizeof w.launcher, "%s", exe);
    char err[512], dir[4200];
    snprintf(dir, sizeof dir, "%s/lexicon", root);
    if (lexicon_load(&web_lexicon, dir, err, sizeof err) != 0) usage_error("shardlab web", "%s (set SHARDLAB_ROOT)", err);
    make_token(w.token);

    // CivetWeb's spelling of where to listen: "127.0.0.1:P", an IPv6 address in brackets
    // ("[::1]:P"), and for :: (every address) "+P": IPv6 and IPv4 both.
    int ipv6 = strchr(w.host, ':') != NULL;
    if (ipv6 && !mg_check_feature(MG_FEATURES_IPV6))  // (Debian's libcivetweb 1.15 is built so)
        usage_error("shardlab web", "--host %s: this CivetWeb library was built without IPv6, so the server cannot listen "
                    "on an IPv6 address; use --host 127.0.0.1, or 0.0.0.0 for every IPv4 address", w.host);
    if (w.port == 0 && (w.port = free_port(ipv6)) == 0)
        die("check the network settings", "no free port on %s", ipv6 ? "::1" : "127.0.0.1");
    char ports[320];
    if (strcmp(w.host, "::") == 0) snprintf(ports, sizeof ports, "+%d", w.port);
    else snprintf(ports, sizeof ports, ipv6 ? "[%s]:%d" : "%s:%d", w.host, w.port);
    char threads[16], timeout_ms[16];
    snprintf(threads, sizeof threads, "%d", WEB_THREADS);
    snprintf(timeout_ms, sizeof timeout_ms, "%d", w.request_timeout_s * 1000);
    const char *options[] = {"listening_ports", ports, "num_threads", threads, "request_timeout_ms", timeout_ms,
                             "enable_keep_alive", "yes", NULL};
    mg_init_library(0);
    struct mg_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.log_message = on_log;
    struct mg_context *ctx = mg_start(&cb, &w, options);
    if (!ctx) {
        // CivetWeb logged why, as "cannot bind to ADDR: errno (reason)": the reason names the
        // fault (an address not this machine's, a port in use), which a guess would not.
        char why[200] = "the address is not this machine's, or the port is in use";
        const char *open = strrchr(bind_error, '('), *close = open ? strchr(open, ')') : NULL;
        if (close && close > open + 1) snprintf(why, sizeof why, "%.*s", (int)(close - open - 1), open + 1);
        usage_error("shardlab web", "cannot listen on %s%s: %s", ports[0] == '+' ? "every address, port " : "",
                    ports[0] == '+' ? ports + 1 : ports, why);
    }
    mg_set_request_handler(ctx, "/", web_route, &w);
    the_web = &w;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(w.host, "127.0.0.1") != 0 && strcmp(w.host, "localhost") != 0)
        fprintf(stderr, "shardlab web: warning: listening on %s, not 127.0.0.1: other machines can reach this server "
                        "(starting labs still needs the token)\n", w.host);
    printf("shardlab web: serving %s (lexicon: %d terms, %d lessons; runs: %s)\n", root, web_lexicon.n, web_lexicon.nlessons, w.runs);
    if (w.checks[0]) printf("shardlab web: the lab pages check the TODO regions with %s\n", w.checks);
    const char *url_host = strcmp(w.host, "0.0.0.0") == 0 || strcmp(w.host, "::") == 0 ? "127.0.0.1" : w.host;
    printf("shardlab web: open http://%s%s%s:%d/?token=%s\n", ipv6 && url_host == w.host ? "[" : "", url_host,
           ipv6 && url_host == w.host ? "]" : "", w.port, w.token);
    fflush(stdout);
    while (!w.stopping) {
        struct timespec ts = {0, 200000000L};
        nanosleep(&ts, NULL);
        runs_reap();
        web_deadlines_enforce();
    }
    printf("shardlab web: stopping\n");
    fflush(stdout);
    mg_stop(ctx);  // every stream sees `stopping` within STREAM_IDLE_MS and returns
    runs_free_all();
    lexicon_free(&web_lexicon);
    return 0;
}
