// test_web.c — the web server over HTTP, as a browser or an attacker would talk to it.
//
// Usage: test_web ROOT SHARDLAB
//   ROOT      the checkout (lexicon/, lessons/, web/static/)
//   SHARDLAB  the sanitized build/san/shardlab: the server runs under ASan; the labs it starts
//             are the sanitized ones next to it
//
// What it proves:
//   1. every lexicon and lesson page answers 200 with its title, the home page links every
//      term, every lab has a form; unknown slugs, labs and runs are 404;
//   2. files come only from the server's own directories: "..", encoded or not, and a
//      symbolic link out of web/static are 404; Debian's KaTeX is served whole (its stylesheet
//      as text/css, a font byte for byte as font/woff2), and only pages with formulas load it;
//   3. nothing acts without the token and from another site: a POST without the token, with a
//      foreign Origin, or with a foreign Host is 403; bad labs and options are 400, and none
//      of them starts anything; a header the checks read (Host, Origin, the token, the
//      cookie, Content-Length), sent twice, is 400;
//   4. a lab started from the API runs; its events come through /events and as Server-Sent
//      Events, every one, in the order of the logs, and a stream resumes after Last-Event-ID;
//   5. clients that leave free their threads (more streams opened and dropped than the server
//      has threads, and it still answers), and the server stops on SIGTERM with a stream open;
//   6. grading from the browser's API: a run without grade.json has none (404); grading needs
//      the token and this site (403), a run that exists (404) and has ended (409); a finished
//      run is graded (200, every check PASS for the reference lab), grade.json written next to
//      it and served back; two requests at once both get the same grade (one grading at a
//      time, the reference run shared); a run whose log was cut is graded FAIL, not crashed on;
//   7. --ref from the browser names a finished run of this server, or is 400 and starts nothing;
//   8. untrusted input never crashes or fools it: no runs at all is an empty list; event indexes
//      and ranks out of range or misspelt are 400; numbers too large in a run's files are shown
//      as unknown; option numbers must be finite, in bounds and plain decimal; markdown that
//      attacks the page (script links, raw HTML) renders without a tag that runs script; the
//      list shows only run ids the pages serve, and counts the directories it leaves out;
//   9. IPv6: Host and Origin [::1]:P are this server; --host ::1 listens there (or, with a
//      CivetWeb built without IPv6, says so); a failure to listen names the address and why;
//  10. threads are never held for long: a body that does not come is cut at the request
//      timeout; streams are capped (503 with Retry-After beyond), a closed stream frees its
//      thread at once; a run whose launcher died ends for the list, its page and its stream.
//  11. a run's timeline for Perfetto (GET /api/runs/<id>/trace) is a JSON download named after
//      the run, 404 for no such run, 409 for a directory with no run in it yet, 405 but for
//      GET, and the run's page links it.
//  12. with --checks (make check's programs, built here for labs/ and for a starter copy), a
//      lab's page lists the TODO regions the lab runs with "Check them"; POST /api/checks
//      needs the token (403) and a POST (405), a known lab (404, 400), and answers the
//      driver's JSON: the starter's regions all "not written yet", labs/'s all "passed";
//      without --checks nothing shows; a bad --checks is one line, exit 2.
//  13. the memory planner (/plan, /api/plan, POST /api/plan/check): the API is what `shardlab
//      plan --json` prints, byte for byte; the page shows what the terminal shows (the ZeRO
//      paper's stages by its names and figures, the model state, the definitions, the note);
//      a check runs the lab and answers what `--check --json` prints.
//  14. the web starts at most --max-runs labs at once (default 1; 429 with the run that holds
//      the slot, twelve requests at once included), and two runs that each fit in memory
//      alone but not together start one after the other; a run whose ranks fail at start (a
//      full disk) ends with status error and the launcher's words.
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "command/plan/planner.h"
#include "common/harness/memfit.h"
#include "labtest.h"
#include "test.h"

#define FUZZ_FILES 40
#define FUZZ_REQUESTS 3000

static const char *root, *shardlab;
static char server_root[600], runs_dir[600];
static int port;
static char token[64];
static pid_t server;
static int recv_timeout_s = 10;  // how long a reply may take (grading starts a reference run)

// ---------------------------------------------------------------------------------------
// A small HTTP client: one request per connection, the whole response back

static int use_ipv6;  // connect to [::1] instead of 127.0.0.1

static int connect_server(void) {
    int fd = socket(use_ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int rc = use_ipv6 ? connect(fd, (struct sockaddr *)&a6, sizeof a6) : connect(fd, (struct sockaddr *)&a, sizeof a);
    if (rc != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {recv_timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

typedef struct {
    int status;
    char *body, *all;
    size_t n;  // the body's bytes (a font holds NULs)
} Resp;

// raw: the request without its final blank line... given whole, e.g. "GET / HTTP/1.1\r\nHost: ...\r\n\r\n".
static Resp request_raw(const char *raw, size_t n) {
    Resp r = {0};
    int fd = connect_server();
    if (fd < 0) return r;
    if (write(fd, raw, n) != (ssize_t)n) {
        close(fd);
        return r;
    }
    shutdown(fd, SHUT_WR);  // all we send: a request cut short is not waited on for its rest
    size_t cap = 1 << 16, len = 0;
    r.all = malloc(cap);
    for (ssize_t k; (k = read(fd, r.all + len, cap - len - 1)) > 0;) {
        len += (size_t)k;
        if (cap - len < 1024) r.all = realloc(r.all, cap *= 2);
    }
    close(fd);
    r.all[len] = 0;
    sscanf(r.all, "HTTP/1.%*d %d", &r.status);
    char *b = strstr(r.all, "\r\n\r\n");
    r.body = b ? b + 4 : r.all + len;
    r.n = len - (size_t)(r.body - r.all);
    return r;
}

static Resp request(const char *method, const char *path, const char *headers, const char *body) {
    char req[8192];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%s", method, path, port,
                     headers ? headers : "");
    if (body) n += snprintf(req + n, sizeof req - (size_t)n, "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                            strlen(body), body);
    else n += snprintf(req + n, sizeof req - (size_t)n, "\r\n");
    return request_raw(req, (size_t)n);
}

static void resp_free(Resp *r) { free(r->all); }

static int get_status(const char *path) {
    Resp r = request("GET", path, NULL, NULL);
    int s = r.status;
    resp_free(&r);
    return s;
}

// ---------------------------------------------------------------------------------------
// The server

static void start_server(void) {
    char url_file[700], env_root[700], env_runs[700];
    snprintf(url_file, sizeof url_file, "%s/server.out", tmp);
    snprintf(env_root, sizeof env_root, "SHARDLAB_ROOT=%s", server_root);
    snprintf(env_runs, sizeof env_runs, "SHARDLAB_RUNS=%s", runs_dir);
    // Two labs at once: check_run compares a run with another while a long one goes on
    // (check_max_runs proves the default of one on a server of its own).
    char *argv[] = {(char *)shardlab, "web", "--port", "0", "--max-runs", "2", NULL};
    // A time zone 5:30 east of UTC (POSIX form, no tz database needed): run names are in UTC
    // whatever the server's zone (check_run).
    char *env[] = {env_root, env_runs, "SHARDLAB_TIMEOUT_S=60", "TZ=IST-5:30", NULL};
    server = spawn_env(argv, "server", env);
    for (double t0 = now_s(); now_s() - t0 < 20 && !port; usleep(50000)) {
        char *out = read_file(url_file, NULL);
        const char *at = out ? strstr(out, "http://127.0.0.1:") : NULL;
        if (at && strstr(at, "token=")) {
            port = atoi(at + 17);
            sscanf(strstr(at, "token=") + 6, "%63[0-9a-f]", token);
        }
        free(out);
    }
}

// A server started by argv (NULL-ended), its output in tmp/<tag>.out and .err, with env1
// ("NAME=value", or NULL) added to the environment beside SHARDLAB_ROOT and SHARDLAB_RUNS=runs.
// Its port and token come from the URL it prints (0 and "" if it printed none within 20 s: it
// refused to start).
static pid_t start_argv(const char *tag, char *const argv[], const char *runs, const char *env1, int *port_out,
                        char *token_out) {
    char out_file[700], env_root[700], env_runs[1000], env_1[1000];
    snprintf(out_file, sizeof out_file, "%s/%s.out", tmp, tag);
    snprintf(env_root, sizeof env_root, "SHARDLAB_ROOT=%s", server_root);
    snprintf(env_runs, sizeof env_runs, "SHARDLAB_RUNS=%s", runs);
    snprintf(env_1, sizeof env_1, "%s", env1 ? env1 : "");
    char *env[] = {env_root, env_runs, env1 ? env_1 : NULL, NULL};
    pid_t pid = spawn_env(argv, tag, env);
    *port_out = 0;
    token_out[0] = 0;
    for (double t0 = now_s(); now_s() - t0 < 20 && !*port_out; usleep(50000)) {
        char *text = read_file(out_file, NULL);
        const char *at = text ? strstr(text, "open http://") : NULL, *tok = at ? strstr(at, "/?token=") : NULL;
        if (tok) {
            const char *colon = tok;
            while (colon > at && *colon != ':') colon--;
            *port_out = atoi(colon + 1);
            sscanf(tok + 8, "%63[0-9a-f]", token_out);
        }
        free(text);
        int status;
        if (!*port_out && waitpid(pid, &status, WNOHANG) == pid) {  // it gave up
            pid = 0;
            break;
        }
    }
    return pid;
}

// Another server on the same course: `opts` after "web" (NULL-ended), its runs in `runs`, as
// start_argv() starts it.
static pid_t start_extra(const char *tag, char *const opts[], const char *runs, int *port_out, char *token_out) {
    char *argv[16] = {(char *)shardlab, "web"};
    int a = 2;
    for (int i = 0; opts && opts[i] && a < 15; i++) argv[a++] = opts[i];
    argv[a] = NULL;
    return start_argv(tag, argv, runs, NULL, port_out, token_out);
}

static void stop_extra(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    wait_status(pid);
}

// --host 0.0.0.0: a browser on the network names the server by this machine's address or
// name, and those Hosts must be served; any other name is still refused (DNS rebinding), and
// a server bound to 127.0.0.1 still refuses the machine's network address.
static void check_lan_host(void) {
    char out_file[700], env_root[700], env_runs[700], addr[64] = "", name[256] = "";
    snprintf(out_file, sizeof out_file, "%s/lan.out", tmp);
    snprintf(env_root, sizeof env_root, "SHARDLAB_ROOT=%s", server_root);
    snprintf(env_runs, sizeof env_runs, "SHARDLAB_RUNS=%s", runs_dir);
    char *argv[] = {(char *)shardlab, "web", "--host", "0.0.0.0", "--port", "0", NULL};
    char *env[] = {env_root, env_runs, NULL};
    pid_t lan = spawn_env(argv, "lan", env);
    int lan_port = 0, main_port = port;
    for (double t0 = now_s(); now_s() - t0 < 20 && !lan_port; usleep(50000)) {
        char *text = read_file(out_file, NULL);
        const char *at = text ? strstr(text, "http://127.0.0.1:") : NULL;
        if (at) lan_port = atoi(at + 17);
        free(text);
    }
    // This machine's first non-loopback IPv4 address, and its name.
    FILE *p = popen("hostname -I 2>/dev/null", "r");
    if (p && fscanf(p, "%63s", addr) != 1) addr[0] = 0;
    if (p) pclose(p);
    gethostname(name, sizeof name - 1);
    port = lan_port;
    char hdr[400];
    int ok_local = get_status("/") == 200, ok_addr = 1, ok_name, bad;
    if (addr[0]) {
        snprintf(hdr, sizeof hdr, "GET / HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", addr, lan_port);
        Resp r = request_raw(hdr, strlen(hdr));
        ok_addr = r.status == 200;
        resp_free(&r);
    }
    snprintf(hdr, sizeof hdr, "GET / HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", name, lan_port);
    Resp r = request_raw(hdr, strlen(hdr));
    ok_name = r.status == 200;
    resp_free(&r);
    snprintf(hdr, sizeof hdr, "GET / HTTP/1.1\r\nHost: evil.example:%d\r\nConnection: close\r\n\r\n", lan_port);
    r = request_raw(hdr, strlen(hdr));
    bad = r.status == 403;
    resp_free(&r);
    EXPECT(lan_port && ok_local && ok_addr && ok_name && bad,
           "--host 0.0.0.0: served as 127.0.0.1, as %s and as %s (this machine); evil.example refused", addr[0] ? addr : "(no address)", name);
    port = main_port;
    if (addr[0]) {
        snprintf(hdr, sizeof hdr, "GET / HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", addr, port);
        r = request_raw(hdr, strlen(hdr));
        EXPECT(r.status == 403, "bound to 127.0.0.1, the machine's network address %s is refused (%d)", addr, r.status);
        resp_free(&r);
    }
    kill(lan, SIGTERM);
    wait_status(lan);
}

// IPv6: a browser names the server [::1]:P, and its pages send Origin http://[::1]:P; both are
// this server. --host ::1 and --host :: listen on IPv6 (CivetWeb wants "[::1]:P"), where the
// CivetWeb library has IPv6; where it has not (Debian's is built without), the server says so
// in one line and exits 2. A host it cannot listen on is named, as tried, with the reason.
// Broken variant: "::1:P" given to CivetWeb, Host compared as "::1:P", and every failure to
// listen blamed on the port.
static void check_ipv6(void) {
    char tok[64], hdr[800];
    snprintf(hdr, sizeof hdr, "GET / HTTP/1.1\r\nHost: [::1]:%d\r\nConnection: close\r\n\r\n", port);
    Resp r = request_raw(hdr, strlen(hdr));
    int named = r.status == 200;
    resp_free(&r);
    const char *body = "{\"lab\":\"no-such-lab\",\"n\":1,\"steps\":1}";  // (a bad lab: 400 once the checks pass)
    snprintf(hdr, sizeof hdr, "POST /api/runs HTTP/1.1\r\nHost: [::1]:%d\r\nOrigin: http://[::1]:%d\r\nX-Shardlab-Token: %s\r\n"
             "Connection: close\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", port, port, token,
             strlen(body), body);
    r = request_raw(hdr, strlen(hdr));
    EXPECT(named && r.status == 400, "Host [::1]:P is this server (200), and a POST from Origin http://[::1]:P passes the "
           "site check (%d)", r.status);
    resp_free(&r);

    int v6_port, main_port = port;
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int have = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    const char *why = have ? "" : strerror(errno);
    if (fd >= 0) close(fd);
    char *opts[] = {"--host", "::1", "--port", "0", NULL};
    pid_t v6 = have ? start_extra("v6", opts, runs_dir, &v6_port, tok) : 0;
    char *err = have ? captured("v6", "err") : calloc(1, 1);
    if (!have) {
        printf("ok - skipped: --host ::1 (this machine has no IPv6 loopback: %s)\n", why);
    } else if (!v6_port && strstr(err, "built without IPv6")) {
        EXPECT(strstr(err, "--host ::1") && !strstr(err, "in use?"), "--host ::1 with a CivetWeb built without IPv6: "
               "refused in one line that says so: %s", one_line(err));
        printf("ok - skipped: serving on [::1] (this CivetWeb library has no IPv6)\n");
    } else {
        port = v6_port;
        use_ipv6 = 1;
        snprintf(hdr, sizeof hdr, "GET / HTTP/1.1\r\nHost: [::1]:%d\r\nConnection: close\r\n\r\n", v6_port);
        r = request_raw(hdr, strlen(hdr));
        int served = r.status == 200;
        resp_free(&r);
        snprintf(hdr, sizeof hdr, "GET / HTTP/1.1\r\nHost: evil.example:%d\r\nConnection: close\r\n\r\n", v6_port);
        r = request_raw(hdr, strlen(hdr));
        int refused = r.status == 403;
        resp_free(&r);
        use_ipv6 = 0;
        char *out = captured("v6", "out");
        EXPECT(v6_port && served && refused && strstr(out, "http://[::1]:"),
               "--host ::1: listens on IPv6, prints http://[::1]:P, serves Host [::1]:P, refuses evil.example (port %d, "
               "%d %d): %s", v6_port, served, refused, one_line(err));
        free(out);
        stop_extra(v6);
        char *any[] = {"--host", "::", "--port", "0", NULL};
        pid_t both = start_extra("v6any", any, runs_dir, &v6_port, tok);
        port = v6_port;
        use_ipv6 = 1;
        snprintf(hdr, sizeof hdr, "GET / HTTP/1.1\r\nHost: [::1]:%d\r\nConnection: close\r\n\r\n", v6_port);
        r = request_raw(hdr, strlen(hdr));
        served = r.status == 200;
        resp_free(&r);
        use_ipv6 = 0;
        EXPECT(v6_port && served && get_status("/") == 200, "--host ::: every address, IPv6 ([::1]) and IPv4 (127.0.0.1) "
               "(port %d)", v6_port);
        stop_extra(both);
        port = main_port;
    }
    free(err);
    // An address that is not this machine's: exit 2, naming the address tried and why.
    char *bad_opts[] = {"--host", "192.0.2.1", "--port", "0", NULL};
    start_extra("badhost", bad_opts, runs_dir, &v6_port, tok);
    err = captured("badhost", "err");
    EXPECT(!v6_port && strstr(err, "cannot listen on 192.0.2.1:") && strstr(err, "assign") && !strstr(err, "in use?"),
           "--host 192.0.2.1 (not this machine): refused, the error names the address tried and why: %s", one_line(err));
    free(err);
}

// A copy of the course with a symbolic link out of web/static, for the server to serve.
static void make_root(void) {
    snprintf(server_root, sizeof server_root, "%s/root", tmp);
    snprintf(runs_dir, sizeof runs_dir, "%s/runs", tmp);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/web' '%s/labs' '%s' && cp -r '%s/lexicon' '%s/lessons' '%s/' && cp -r '%s/web/static' '%s/web/' "
             "&& mkdir -p '%s/labs/common' && ln -s /etc/passwd '%s/web/static/passwd-link'",
             server_root, server_root, runs_dir, root, root, server_root, root, server_root, server_root, server_root);
    if (system(cmd) != 0) printf("# setting up the root failed: %s\n", cmd);
    // Markdown for the renderer to choke on: the real entries cut, spliced and sprinkled with
    // the constructs it handles (wiki links, tables, HTML, code fences), seeded by rank of file.
    const char *bits[] = {"[[", "]]", "[[zero", "|", "|---|", "```", "<details>", "</summary>", "**", "`", "\n", "# ",
                          "- ", "1. ", "> ", "<x-wikilink data-target=\"", "&amp;", "&#", "\\", "[a](", ")", "<script>"};
    char *src = read_file("lexicon/ring-all-reduce.md", NULL);
    if (!src) {
        char p2[700];
        snprintf(p2, sizeof p2, "%s/lexicon/ring-all-reduce.md", root);
        src = read_file(p2, NULL);
    }
    size_t n = src ? strlen(src) : 0;
    unsigned seed = 12345;
    for (int f = 0; f < FUZZ_FILES && src; f++) {
        char path[900];
        snprintf(path, sizeof path, "%s/lexicon/fuzz-%d.md", server_root, f);
        FILE *out = fopen(path, "w");
        if (!out) break;
        fprintf(out, "# Fuzz %d\n\n", f);
        for (int k = 0; k < 60; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % (n ? n : 1), len = (seed >> 3) % 200;
            if (at + len > n) len = n - at;
            fwrite(src + at, 1, len, out);
            fputs(bits[(seed >> 16) % (sizeof bits / sizeof bits[0])], out);
        }
        fclose(out);
    }
    free(src);
    // A term written to attack the page: links and raw HTML that would run script.
    char hostile[900];
    snprintf(hostile, sizeof hostile, "%s/lexicon/hostile.md", server_root);
    write_text(hostile, "w",
               "# Hostile\n\n"
               "[a](javascript:alert(1)) [b](JaVaScRiPt:alert(2)) [c](<javascript:alert(3)>) [d](java&#x09;script:alert(4))\n"
               "[e](vbscript:msgbox(5)) [f](data:text/html,x) [g](javascript&colon;alert(7)) [h](%6Aavascript:alert(8))\n"
               "![i](javascript:alert(9)) <javascript:alert(10)> [j](\\x01javascript:alert(11)) [k](&#106;avascript:alert(12))\n\n"
               "<a href=\"javascript:alert(13)\">raw</a> <img src=x onerror=alert(14)> <script>alert(15)</script>\n"
               "<a href=\"java&#115;cript:alert(16)\">ent</a> <a href=\" JAVASCRIPT:alert(17)\">sp</a> <a title=\">\" href=\"javascript:alert(18)\">q</a>\n\n"
               "<div onclick=\"alert(19)\">div</div>\n\n"
               "<details open ontoggle=\"alert(20)\"><summary>S</summary>\n\n"
               "[ok](https://example.org/x) [rel](/lexicon/zero) [[zero]]\n\n"
               "</details>\n");
}

// No runs yet (an empty runs folder, or none at all): the list is empty JSON, and the server
// goes on (the home page asks for it first thing). Broken variant: sorting the list with a
// NULL array when the folder had nothing in it.
static void check_no_runs(void) {
    Resp r = request("GET", "/api/runs", NULL, NULL);
    int empty = r.status == 200 && r.body && strcmp(r.body, "{\"runs\":[],\"unlisted\":0}") == 0;
    resp_free(&r);
    EXPECT(empty && get_status("/") == 200, "GET /api/runs with an empty runs folder: 200 {\"runs\":[],\"unlisted\":0}, and the server "
           "still answers");
    char missing[700], tok[64];
    snprintf(missing, sizeof missing, "%s/no-runs-here", tmp);
    char *opts[] = {"--port", "0", NULL};
    int extra_port, main_port = port;
    pid_t extra = start_extra("noruns", opts, missing, &extra_port, tok);
    port = extra_port;
    r = request("GET", "/api/runs", NULL, NULL);
    empty = extra_port && r.status == 200 && r.body && strcmp(r.body, "{\"runs\":[],\"unlisted\":0}") == 0;
    resp_free(&r);
    EXPECT(empty && get_status("/") == 200, "GET /api/runs with no runs folder at all: 200 {\"runs\":[],\"unlisted\":0}, and the server "
           "still answers");
    port = main_port;
    stop_extra(extra);
    char *err = captured("noruns", "err");
    EXPECT(!strstr(err, "ERROR: AddressSanitizer") && !strstr(err, "runtime error"),
           "that server ran clean under ASan/UBSan: %s", one_line(err));
    free(err);
}

// ---------------------------------------------------------------------------------------
// 1-2. Pages and files

// The value of a reply's header, or "" (the first line that starts with name).
static void header_of(const Resp *r, const char *name, char *out, size_t max) {
    out[0] = 0;
    size_t k = strlen(name);
    for (const char *l = r->all ? strstr(r->all, "\r\n") : NULL; l && l < r->body; l = strstr(l + 2, "\r\n"))
        if (strncasecmp(l + 2, name, k) == 0 && l[2 + k] == ':') {
            const char *v = l + 3 + k + strspn(l + 3 + k, " ");
            snprintf(out, max, "%.*s", (int)strcspn(v, "\r"), v);
            return;
        }
}

// Debian's KaTeX, which draws the formulas (web/static/math.js): its stylesheet and script,
// and a font, whole (a font is binary: a server that read it as text would cut it at its first
// NUL). Broken variants: no /static/katex/ route (404), fonts sent as application/octet-stream,
// a file's length taken with strlen.
#define KATEX_FONT "/usr/share/javascript/katex/fonts/KaTeX_Main-Regular.woff2"
// The planner's page and API: the plan `shardlab plan ... --json` prints, byte for byte; what
// the planner refuses is a 400 (API) or a message on the page, escaped; the form is there.
static int runs_count(void);

// "Check it": POST /api/plan/check runs the lab at the plan's shape and answers what
// `shardlab plan ... --check --json` prints; the page offers it for small shapes only.
static void check_plan_check(void) {
    char own[300], foreign[300];
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", token, port);
    snprintf(foreign, sizeof foreign, "X-Shardlab-Token: %s\r\nOrigin: http://evil.example\r\n", token);
    const char *query = "/api/plan/check?lab=zero&n=2&stage=3";
    // The check, sent without waiting for its answer; a second one meanwhile is turned away.
    char req[1024];
    int n = snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: 0\r\n\r\n", query, port, own);
    int fd = connect_server();
    int sent = fd >= 0 && write(fd, req, (size_t)n) == n;
    usleep(300000);
    Resp busy = request("POST", query, own, "");
    char retry[16] = "";
    header_of(&busy, "Retry-After", retry, sizeof retry);
    // Proves: one check at a time; the second is told to come back, and starts nothing.
    EXPECT(busy.status == 429 && atoi(retry) > 0 && strstr(busy.body, "one check at a time"),
           "a second POST /api/plan/check while one runs: 429 with Retry-After (%d, '%s': %s)", busy.status, retry,
           one_line(busy.body));
    resp_free(&busy);
    Resp api = {0};
    if (sent) {
        shutdown(fd, SHUT_WR);
        size_t cap = 1 << 16, len = 0;
        api.all = malloc(cap);
        for (ssize_t k; (k = read(fd, api.all + len, cap - len - 1)) > 0;) {
            len += (size_t)k;
            if (cap - len < 1024) api.all = realloc(api.all, cap *= 2);
        }
        api.all[len] = 0;
        sscanf(api.all, "HTTP/1.%*d %d", &api.status);
        char *b = strstr(api.all, "\r\n\r\n");
        api.body = b ? b + 4 : api.all + len;
    }
    if (fd >= 0) close(fd);
    char *argv[] = {(char *)shardlab, "plan", "zero", "-n", "2", "--stage", "3", "--check", "--json", NULL};
    int rc = run(argv, "plan-check-cli");
    char *cli = captured("plan-check-cli", "out");
    // Proves: the browser's check ran the lab (2 ranks, ZeRO-3) and found every figure equal,
    // and its answer is the command's, to the byte (one implementation behind both).
    EXPECT(api.status == 200 && rc == 0 && api.body && !strcmp(api.body, cli) && strstr(cli, "\"figures\":20,\"equal\":20,\"ok\":true"),
           "POST %s: 200, 20 of 20 figures equal, and what `shardlab plan zero -n 2 --stage 3 --check --json` prints "
           "(%d, exit %d; %.200s)", query, api.status, rc, api.body ? one_line(api.body) : "");
    resp_free(&api), free(cli);

    static const struct {
        const char *query, *headers_kind, *says;
        int status;
    } bad[] = {
        {"/api/plan/check?lab=zero&n=2&stage=3", "none", "needs this server's token", 403},
        {"/api/plan/check?lab=zero&n=2&stage=3", "foreign", "needs this server's token", 403},
        {"/api/plan/check?lab=ddp&n=8&model=gpt2", "own", "not --model", 400},
        {"/api/plan/check?lab=zero&n=16&batch=16", "own", "at most 8 ranks", 400},
        {"/api/plan/check?lab=ddp&n=2&layers=64&dim=2048", "own", "a check may take", 400},
        {"/api/plan/check?lab=ddp&n=2&vocab=512", "own", "vocabulary 256", 400},
        {"/api/plan/check?lab=ddp&n=2&data=/etc/passwd", "own", "--data is the command line's", 400},
        {"/api/plan/check?lab=ddp&n=2&save=/tmp/x.safetensors", "own", "--save is the command line's", 400},
        {"/api/plan/check?lab=ddp&heads=5", "own", "--heads 5 does not divide --dim 64", 400},
    };
    int ok = 1, before = runs_count();
    char first[400] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *h = !strcmp(bad[i].headers_kind, "own") ? own : !strcmp(bad[i].headers_kind, "foreign") ? foreign : NULL;
        Resp r = request("POST", bad[i].query, h, "");
        if (!(r.status == bad[i].status && strstr(r.body, bad[i].says) && count_lines(r.body) <= 1) && ok)
            ok = 0, snprintf(first, sizeof first, "%s: %d %s", bad[i].query, r.status, one_line(r.body));
        resp_free(&r);
    }
    Resp get = request("GET", query, own, NULL);
    // Proves: nothing runs without the token, from another site, by GET, with a path among the
    // options, or at a shape this machine should not run: a 4xx and one line, no run started.
    EXPECT(ok && get.status == 405 && runs_count() == before,
           "POST /api/plan/check refuses %zu requests (no token, another site, a preset model, 16 ranks, 64 x 2048, "
           "--vocab 512, --data, --save, a bad shape) with 403/400 and one line, GET with 405%s%s (GET %d)",
           sizeof bad / sizeof bad[0], first[0] ? ": " : "", first, get.status);
    resp_free(&get);

    Resp page = request("GET", "/plan?lab=zero&n=2&stage=3&token=0123", NULL, NULL);
    Resp big = request("GET", "/plan?lab=zero&n=8&stage=3&model=gpt2", NULL, NULL);
    // Proves: the page offers "Check it" for a small shape (its query rebuilt from the plan, no
    // token in it) and says why not for GPT-2.
    EXPECT(page.status == 200 && strstr(page.body, "id=\"plan-check-form\" method=\"post\" action=\"/api/plan/check?lab=zero&amp;n=2&amp;") &&
               strstr(page.body, "&amp;stage=3\"") && !strstr(page.body, "token=0123") && strstr(page.body, "src=\"/static/plan.js\"") &&
               big.status == 200 && strstr(big.body, "id=\"plan-check-refused\"") && !strstr(big.body, "plan-check-form") &&
               strstr(big.body, "not --model"),
           "/plan?lab=zero&n=2&stage=3: a Check it button posting to /api/plan/check; with --model gpt2: why not, no button");
    resp_free(&page), resp_free(&big);
}

// text as the page writes it (HTML-escaped), found in page.
static int on_page(const char *page, const char *text) {
    StrBuf sb;
    sb_init(&sb);
    sb_markup_text(&sb, text);
    int found = strstr(page, sb.data) != NULL;
    sb_free(&sb);
    return found;
}

// The ZeRO paper's figure 1 on the page, with what the terminal prints beside it: the API is
// the command's JSON for a bare count too; the page shows the four stages by the paper's names
// and figures, the stage planned marked, the model state totalled, every symbol the terminal
// defines (planner_terms: Psi' with its value among them) and what a framework adds.
static void check_plan_paper(void) {
    Resp api = request("GET", "/api/plan?lab=zero&n=64&psi=7.5B&mixed=on&stage=2", NULL, NULL);
    char *argv[] = {(char *)shardlab, "plan", "zero", "-n", "64", "--psi", "7.5B", "--mixed", "--stage", "2", "--json", NULL};
    int rc = run(argv, "plan-paper-cli");
    char *cli = captured("plan-paper-cli", "out");
    // Proves: --psi reaches the planner from the address as from the command line.
    EXPECT(api.status == 200 && rc == 0 && cli[0] && !strcmp(api.body, cli) && strstr(api.body, "\"name\":\"P_os+g\""),
           "/api/plan?lab=zero&n=64&psi=7.5B&mixed=on&stage=2: what `shardlab plan zero -n 64 --psi 7.5B --mixed --stage 2 "
           "--json` prints (%d; %s)", api.status, one_line(api.body));
    resp_free(&api), free(cli);

    Resp page = request("GET", "/plan?lab=zero&n=64&psi=7.5B&mixed=on&stage=2", NULL, NULL);
    const char *b = page.body ? page.body : "";
    static const char *const rows[] = {
        "<td>0</td><td>baseline DDP</td><td class=\"num\">15.0 GB</td><td class=\"num\">15.0 GB</td><td class=\"num\">90.0 GB"
        "</td><td class=\"num\"><strong>120 GB</strong></td><td class=\"num\">111.76 GiB</td>",
        "<td>1</td><td>P_os</td><td class=\"num\">15.0 GB</td><td class=\"num\">15.0 GB</td><td class=\"num\">1.41 GB</td>"
        "<td class=\"num\"><strong>31.4 GB</strong></td>",
        "<tr class=\"current\"><td>2</td><td>P_os+g <small>(this plan)</small></td><td class=\"num\">15.0 GB</td>"
        "<td class=\"num\">234 MB</td><td class=\"num\">1.41 GB</td><td class=\"num\"><strong>16.6 GB</strong></td>",
        "<td>3</td><td>P_os+g+p</td><td class=\"num\">234 MB</td><td class=\"num\">234 MB</td><td class=\"num\">1.41 GB</td>"
        "<td class=\"num\"><strong>1.88 GB</strong></td><td class=\"num\">1.75 GiB</td>",
    };
    int ok = page.status == 200;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) ok &= strstr(b, rows[i]) != NULL;
    // The symbols and the note: the planner's own texts, as the terminal prints them.
    Planner p;
    char why[300], *words[] = {"zero", "-n", "64", "--psi", "7.5B", "--mixed", "--stage", "2"};
    PlannerTerm terms[12];
    int nterms = planner_parse(&p, 8, words, why, sizeof why) == 0 && planner_lay_out(&p, 1, why, sizeof why) == 0
                     ? planner_terms(&p, terms, 12) : 0;
    int defined = nterms >= 5 && on_page(b, planner_note) && on_page(b, planner_precision(&p));
    for (int i = 0; i < nterms; i++) defined &= on_page(b, terms[i].term) && on_page(b, terms[i].text);
    // Proves: the page is the terminal's table: the paper's figures under its names, the stage
    // planned marked, the state totalled in GB, the units and Psi' defined, the note; a count
    // without a shape is not offered a check (broken on purpose: the page without its
    // definitions, caught).
    EXPECT(ok && defined && strstr(b, "<span class=\"paper-name\">P_os+g</span>") &&
               strstr(b, "class=\"plan-state\"><th>state</th><td class=\"num\">15.50 GiB</td><td></td><td>params + grads + "
                         "optim = <strong>16.6 GB</strong>") &&
               strstr(b, "Psi' = 7,500,000,000") && strstr(b, "id=\"plan-check-refused\"") &&
               strstr(b, "id=\"p-psi\" name=\"psi\" value=\"7.5B\""),
           "/plan?lab=zero&n=64&psi=7.5B&mixed=on&stage=2: the ZeRO paper's rows 120 / 31.4 / 16.6 / 1.88 GB by its names, "
           "stage 2 marked, its state 16.6 GB, the %d definitions and the note of the terminal, no check (%d%s)", nterms,
           page.status, ok ? "" : ": a row missing");
    resp_free(&page);

    // --offload: the host's share on the page, as in the terminal; a preset's note too.
    page = request("GET", "/plan?lab=zero&n=8&stage=3&offload=on&model=gpt2", NULL, NULL);
    b = page.body ? page.body : "";
    EXPECT(page.status == 200 && strstr(b, "<tr class=\"plan-host\"><th>host</th>") && strstr(b, "12 Psi'/N in host memory") &&
               on_page(b, planner_models[1].note) && strstr(b, "(without --offload, as the paper has it)"),
           "/plan?lab=zero&n=8&stage=3&offload=on&model=gpt2: the host row, GPT-2's note, the paper's stages without --offload");
    resp_free(&page);
    // A count without a shape cannot be checked here even on 2 ranks: the lab needs a shape.
    page = request("GET", "/plan?lab=zero&n=2&psi=1e6", NULL, NULL);
    b = page.body ? page.body : "";
    EXPECT(page.status == 200 && strstr(b, "id=\"plan-check-refused\"") && strstr(b, "not --psi") && !strstr(b, "plan-check-form"),
           "/plan?lab=zero&n=2&psi=1e6: no Check it button, and why (%d)", page.status);
    resp_free(&page);
}

static void check_plan(void) {
    Resp api = request("GET", "/api/plan?lab=zero&n=8&stage=3&model=gpt2&mixed=on&batch=16", NULL, NULL);
    char *argv[] = {(char *)shardlab, "plan", "zero", "-n", "8", "--stage", "3", "--model", "gpt2", "--mixed", "--batch", "16",
                    "--json", NULL};
    int rc = run(argv, "plan-cli");
    char *cli = captured("plan-cli", "out");
    // Proves: the API's plan is the command's, to the byte (one implementation behind both).
    EXPECT(api.status == 200 && rc == 0 && cli[0] && !strcmp(api.body, cli) && strstr(api.body, "\"stage\":0"),
           "/api/plan?lab=zero&n=8&stage=3&model=gpt2&mixed=on&batch=16: 200 and what `shardlab plan ... --json` prints "
           "(%d; %s)", api.status, one_line(api.body));
    resp_free(&api), free(cli);
    static const struct {
        const char *query, *says;
    } bad[] = {
        {"/api/plan", "choose a lab"},
        {"/api/plan?lab=collectives", "no memory formulas yet for 'collectives'"},
        {"/api/plan?lab=ddp&heads=5", "--heads 5 does not divide --dim 64"},
        {"/api/plan?lab=ddp&n=3", "--batch 8 does not split"},
        {"/api/plan?lab=zero&stage=9", "--stage"},
        {"/api/plan?lab=ddp&n=99999999999", "-n takes"},
        {"/api/plan?lab=fsdp&n=6&replicate=4", "--replicate 4 does not divide the 6 ranks"},
    };
    int ok = 1;
    char first[300] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Resp r = request("GET", bad[i].query, NULL, NULL);
        if (!(r.status == 400 && strstr(r.body, bad[i].says)) && ok)
            ok = 0, snprintf(first, sizeof first, "%s: %d %s", bad[i].query, r.status, one_line(r.body));
        resp_free(&r);
    }
    // Proves: a layout no lab can run is a 400 that says why, never a plan or a crash.
    EXPECT(ok, "/api/plan refuses %zu impossible layouts with 400 and the planner's reason%s%s", sizeof bad / sizeof bad[0],
           first[0] ? ": " : "", first);
    // Context parallelism: the form offers the lab and its layout, the plan names the rank it
    // planned and its tokens.
    Resp cpp = request("GET", "/plan?lab=cp&n=4&layout=contiguous&seq=64", NULL, NULL);
    EXPECT(cpp.status == 200 && strstr(cpp.body, "name=\"layout\"") && strstr(cpp.body, "name=\"kv\"") &&
               strstr(cpp.body, "T&#39;, M, n") && strstr(cpp.body, "32 B M C"),
           "/plan?lab=cp&n=4&layout=contiguous: 200, the form's layout and K/V choices, the plan's T', M, n and the "
           "ring's 32 B M C (%d)", cpp.status);
    resp_free(&cpp);
    Resp hsdp = request("GET", "/plan?lab=fsdp&n=4&replicate=2", NULL, NULL);
    // Proves: the form has HSDP's field, and a plan with it is FSDP's at S = N/R.
    EXPECT(hsdp.status == 200 && strstr(hsdp.body, "name=\"replicate\"") && strstr(hsdp.body, "e Psi&#39;/S") &&
               strstr(hsdp.body, "name=\"replicate\" value=\"2\""),
           "/plan?lab=fsdp&n=4&replicate=2: 200, the form's replicas field filled in, the formulas at S (%d)", hsdp.status);
    resp_free(&hsdp);
    Resp post = request("POST", "/api/plan?lab=ddp", "Content-Type: application/json\r\n", "{}");
    EXPECT(post.status == 405, "POST /api/plan: 405 (%d)", post.status);
    resp_free(&post);

    Resp page = request("GET", "/plan?lab=pp&n=4&model=gpt2-medium&micro=8&stage=3&gpu=rtx4090", NULL, NULL);
    // Proves: the page plans each pipeline stage (stage=, not a pp option, left out), says
    // whether it fits the chosen card, and keeps the form filled in.
    EXPECT(page.status == 200 && strstr(page.body, "id=\"plan-form\"") && strstr(page.body, "<h3>stage 3: Psi_s = ") &&
               strstr(page.body, "one RTX 4090 24GB") && strstr(page.body, "<option selected>gpt2-medium</option>") &&
               strstr(page.body, "value=\"8\""),
           "/plan?lab=pp&n=4&model=gpt2-medium...: 200, the form as filled in, a table per stage, the fit on an RTX 4090");
    resp_free(&page);
    check_plan_paper();
    Resp evil = request("GET", "/plan?lab=%3Cscript%3Ealert(1)%3C/script%3E", NULL, NULL);
    EXPECT(evil.status == 200 && strstr(evil.body, "id=\"plan-error\"") && strstr(evil.body, "&lt;script&gt;") &&
               !strstr(evil.body, "<script>alert"),
           "/plan with a lab named <script>: the planner's message on the page, escaped");
    resp_free(&evil);
    check_plan_check();
}

static void check_katex(void) {
    char type[128], length[32];
    Resp css = request("GET", "/static/katex/katex.min.css", NULL, NULL);
    header_of(&css, "Content-Type", type, sizeof type);
    EXPECT(css.status == 200 && strncmp(type, "text/css", 8) == 0 && strstr(css.body, ".katex"),
           "/static/katex/katex.min.css: 200, text/css, KaTeX's stylesheet (status %d, %s)", css.status, type);
    resp_free(&css);
    Resp js = request("GET", "/static/katex/katex.min.js", NULL, NULL);
    header_of(&js, "Content-Type", type, sizeof type);
    Resp math = request("GET", "/static/math.js", NULL, NULL);
    EXPECT(js.status == 200 && strncmp(type, "text/javascript", 15) == 0 && math.status == 200,
           "/static/katex/katex.min.js (a symbolic link in Debian's package) and /static/math.js: 200 (%d, %s; %d)",
           js.status, type, math.status);
    resp_free(&js), resp_free(&math);

    size_t size = 0;
    char *want = read_file(KATEX_FONT, &size);
    Resp font = request("GET", "/static/katex/fonts/KaTeX_Main-Regular.woff2", NULL, NULL);
    header_of(&font, "Content-Type", type, sizeof type);
    header_of(&font, "Content-Length", length, sizeof length);
    EXPECT(want && font.status == 200 && !strcmp(type, "font/woff2") && font.n == size && strtoull(length, NULL, 10) == size &&
           memcmp(font.body, want, size) == 0,
           "a KaTeX font (fonts/ links out to /usr/share/fonts): 200, font/woff2, all %zu bytes, as on disk "
           "(status %d, %s, %zu bytes, Content-Length %s)", size, font.status, type, font.n, length);
    resp_free(&font);
    free(want);

    // Only a page with formulas loads KaTeX: the ZeRO term has them, barrier and home none.
    Resp zero = request("GET", "/lexicon/zero", NULL, NULL), barrier = request("GET", "/lexicon/barrier", NULL, NULL),
         home = request("GET", "/", NULL, NULL);
    int in_zero = zero.body && strstr(zero.body, "href=\"/static/katex/katex.min.css\"") &&
                  strstr(zero.body, "src=\"/static/katex/katex.min.js\"") && strstr(zero.body, "src=\"/static/math.js\"") &&
                  strstr(zero.body, "<code class=\"language-formula\">stage_0 = 4*Psi+4*Psi+8*Psi\n");
    int elsewhere = (barrier.body && strstr(barrier.body, "katex")) || (home.body && strstr(home.body, "katex"));
    EXPECT(in_zero && !elsewhere, "/lexicon/zero loads KaTeX and math.js, its formulas in the page as written; "
           "a term without formulas and the home page load neither");
    resp_free(&zero), resp_free(&barrier), resp_free(&home);

    // The way out of KaTeX's directory, in every spelling: 404, nothing read.
    const char *out[] = {"/static/katex/../../../etc/passwd", "/static/katex/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                         "/static/katex/fonts/..%2f..%2f..%2f..%2fetc%2fpasswd", "/static/katex/fonts",
                         "/static/katex/fonts/", "/static/katex/"};
    int not404 = 0;
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) {
        Resp r = request("GET", out[i], NULL, NULL);
        if (r.status != 404 || (r.body && strstr(r.body, "root:"))) not404++, printf("# %s: %d\n", out[i], r.status);
        resp_free(&r);
    }
    EXPECT(not404 == 0, "/static/katex/../../../etc/passwd, encoded, and KaTeX's directories themselves: 404 (%d not)", not404);
}

static void check_pages(void) {
    Resp home = request("GET", "/", NULL, NULL);
    int pages = 0, bad = 0, linked = 0;
    char dir[700];
    for (int pass = 0; pass < 2; pass++) {
        snprintf(dir, sizeof dir, "%s/%s", root, pass ? "lessons" : "lexicon");
        DIR *d = opendir(dir);
        for (struct dirent *e; d && (e = readdir(d));) {
            size_t l = strlen(e->d_name);
            // (A folder's README.md is for readers of the tree: no page of the course.)
            if (l < 4 || strcmp(e->d_name + l - 3, ".md") != 0 || !strcmp(e->d_name, "README.md")) continue;
            char slug[128], path[256], mdpath[1024], title[256] = "", want[700];
            snprintf(slug, sizeof slug, "%.*s", (int)(l - 3), e->d_name);
            snprintf(path, sizeof path, "/%s/%s", pass ? "lessons" : "lexicon", slug);
            snprintf(mdpath, sizeof mdpath, "%s/%s", dir, e->d_name);
            char *md = read_file(mdpath, NULL);
            if (md) sscanf(md, "# %255[^\n]", title);
            free(md);
            // the title as HTML would escape it
            char esc[600] = "";
            for (const char *p = title; *p; p++) {
                const char *rep = *p == '&' ? "&amp;" : *p == '<' ? "&lt;" : *p == '>' ? "&gt;" : NULL;
                size_t k = strlen(esc);
                if (rep) snprintf(esc + k, sizeof esc - k, "%s", rep);
                else if (k + 1 < sizeof esc) esc[k] = *p, esc[k + 1] = 0;
            }
            snprintf(want, sizeof want, "<title>%s · shardlab</title>", esc);
            Resp r = request("GET", path, NULL, NULL);
            pages++;
            if (r.status != 200 || !strstr(r.body, want) || strstr(r.body, "x-wikilink") || strstr(r.body, "[["))
                bad++, printf("# %s: status %d, title or links wrong\n", path, r.status);
            resp_free(&r);
            char href[300];
            snprintf(href, sizeof href, "href=\"%s\"", path);
            if (home.body && strstr(home.body, href)) linked++;
        }
        if (d) closedir(d);
    }
    EXPECT(pages == 68 && bad == 0, "every lexicon and lesson page is 200 with its title and real links (%d pages, %d bad)",
           pages, bad);
    // Proves: lessons/README.md (the folder's guide) is not served as a 20th lesson.
    EXPECT(get_status("/lessons/README") == 404, "lessons/README.md is no lesson: /lessons/README is 404");
    EXPECT(home.status == 200 && linked == 68 && strstr(home.body, "id=\"lexicon-search\""),
           "the home page links every term and lesson (%d of 68) and has the lexicon search", linked);
    resp_free(&home);
    const char *labs[] = {"single", "collectives", "ddp", "zero", "fsdp", "tp", "pp", "ckpt", "shard", "cp"};
    int forms = 0, mixed = 0;
    for (int i = 0; i < 10; i++) {
        char path[64];
        snprintf(path, sizeof path, "/labs/%s", labs[i]);
        Resp r = request("GET", path, NULL, NULL);
        forms += r.status == 200 && strstr(r.body, "id=\"lab-form\"") != NULL;
        const char *want = "type=\"checkbox\" id=\"f-mixed\" name=\"mixed\"";
        const char *box = r.body ? strstr(r.body, want) : NULL;
        mixed += box && !strstr(box + strlen(want), "id=\"f-mixed\"") && strcmp(labs[i], "collectives") != 0;
        resp_free(&r);
    }
    EXPECT(forms == 10, "every lab has a form page (%d of 10)", forms);
    EXPECT(mixed == 9, "every training lab's form has one --mixed checkbox (%d of 9)", mixed);
    EXPECT(get_status("/lexicon/no-such-term") == 404 && get_status("/lessons/99-nothing") == 404 &&
           get_status("/labs/rm") == 404 && get_status("/runs/no-such-run") == 404 && get_status("/nowhere") == 404 &&
           get_status("/api/runs/no-such-run") == 404,
           "unknown term, lesson, lab, run and path: 404");
    EXPECT(get_status("/static/app.css") == 200 && get_status("/static/vendor/chart.min.js") == 200,
           "the stylesheet and Debian's Chart.js are served");
    check_katex();
    check_plan();

    // Traversal, in the spellings a client can send (raw, so nothing normalizes it first).
    const char *attempts[] = {
        "/static/../../Makefile",        "/static/..%2f..%2fMakefile",      "/static/%2e%2e/%2e%2e/Makefile",
        "/static/%2e%2e%2f%2e%2e%2fMakefile", "/lexicon/..%2f..%2fMakefile", "/lexicon/../Makefile",
        "/static/vendor/../../../../etc/passwd", "/static/vendor/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/static/passwd-link",           "/static//etc/passwd",             "/static/%00",
        "/static/.%2e/web.h",            "/runs/..%2f..%2fetc",             "/static/..\\..\\Makefile",
        "/static/katex/../../../etc/passwd", "/static/katex/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static/katex/fonts/..%2f..%2f..%2f..%2fetc%2fpasswd",
    };
    int leaked = 0;
    for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++) {
        Resp r = request("GET", attempts[i], NULL, NULL);
        int bad_one = r.status != 404 && r.status != 400;
        if (bad_one || (r.body && (strstr(r.body, "root:") || strstr(r.body, "CFLAGS"))))
            leaked++, printf("# %s: status %d\n", attempts[i], r.status);
        resp_free(&r);
    }
    EXPECT(leaked == 0, "path traversal (%zu spellings, and a symbolic link out of web/static): 404, nothing read",
           sizeof attempts / sizeof attempts[0]);
}

// Random requests at the router: garbage methods, paths of random bytes (percent-encoded or
// raw), odd headers, truncated requests; then the fuzzed markdown pages. The server must
// answer each with a status or close, never crash (it runs under ASan), and still answer.
static void check_fuzz(void) {
    unsigned seed = 777;
    int answered = 0;
    const char *methods[] = {"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "G\x01T", ""};
    const char *prefixes[] = {"/", "/static/", "/lexicon/", "/lessons/", "/labs/", "/runs/", "/api/runs/", "/api/"};
    for (int i = 0; i < FUZZ_REQUESTS; i++) {
        char path[300], req[1200];
        size_t k = 0;
        seed = seed * 1103515245u + 12345u;
        k += (size_t)snprintf(path, sizeof path, "%s", prefixes[(seed >> 12) % 8]);
        int len = (int)((seed >> 4) % 60);
        for (int j = 0; j < len && k + 4 < sizeof path; j++) {
            seed = seed * 1103515245u + 12345u;
            unsigned char c = (unsigned char)(seed >> 16);
            if (c < 33 || c > 126 || c == '%') k += (size_t)snprintf(path + k, sizeof path - k, "%%%02X", c);
            else path[k++] = (char)c;
        }
        path[k] = 0;
        int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s%sConnection: close\r\n\r\n",
                         methods[(seed >> 20) % 8], path, port, (seed & 1) ? "Origin: http://x\r\n" : "",
                         (seed & 2) ? "Content-Length: 5\r\n" : "");
        if (seed & 4) n = n / 2;  // a request cut short
        Resp r = request_raw(req, (size_t)n);
        answered += r.all != NULL;
        resp_free(&r);
    }
    int md_ok = 0;
    for (int f = 0; f < FUZZ_FILES; f++) {
        char path[64];
        snprintf(path, sizeof path, "/lexicon/fuzz-%d", f);
        Resp r = request("GET", path, NULL, NULL);
        md_ok += r.status == 200 && !strstr(r.body, "<x-wikilink");  // (escaped text of one is fine)
        resp_free(&r);
    }
    EXPECT(answered == FUZZ_REQUESTS && get_status("/") == 200,
           "fuzz: %d random requests (methods, bytes in paths, cut short) answered or closed, and the server still serves",
           FUZZ_REQUESTS);
    EXPECT(md_ok == FUZZ_FILES, "fuzz: %d pages of mangled markdown rendered (200), wiki links rewritten (%d ok)",
           FUZZ_FILES, md_ok);
}

// Every tag in an HTML text, as the browser would find it: 1 if none runs script or leaves the
// site through a scheme (javascript:, vbscript:, data:), and no tag is script, iframe, object
// or an event handler (on...=). Escaped text (&lt;...) holds no tags: it is not looked at.
static int tags_safe(const char *html, char *why, size_t whylen) {
    for (const char *p = html; (p = strchr(p, '<')); p++) {
        const char *end = strchr(p, '>');
        if (!end) break;
        char tag[1024];
        size_t n = 0;
        for (const char *q = p; q <= end && n + 1 < sizeof tag; q++)
            if (!isspace((unsigned char)*q) || (n && tag[n - 1] != ' ')) tag[n++] = (char)tolower(isspace((unsigned char)*q) ? ' ' : *q);
        tag[n] = 0;
        const char *bad[] = {"javascript", "vbscript", "data:", "<script", "<iframe", "<object", "<div", " on", "&#", "&colon"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            if (strstr(tag, bad[i])) return snprintf(why, whylen, "%s", tag), 0;
    }
    return 1;
}

// tags_safe() on what the markdown became: the page's <article> (outside it, the page's own
// scripts: KaTeX and math.js on a page with formulas).
static int article_safe(const char *html, char *why, size_t whylen) {
    const char *a = html ? strstr(html, "<article") : NULL, *end = a ? strstr(a, "</article>") : NULL;
    if (!end) return snprintf(why, whylen, "no <article>"), 0;
    char *text = strndup(a, (size_t)(end - a));
    int ok = tags_safe(text, why, whylen);
    free(text);
    return ok;
}

// Markdown that attacks the page (lexicon/hostile.md, written by make_root): links to
// javascript:, vbscript: and data: in any case, spacing or entity spelling, raw HTML with
// script and event handlers. The page keeps its text and safe links, and no tag in it runs
// script. Broken variant: md4c-html's output sent as it is (raw HTML passed through).
static void check_hostile_markdown(void) {
    Resp r = request("GET", "/lexicon/hostile", NULL, NULL);
    char why[1024] = "";
    int safe = r.status == 200 && article_safe(r.body, why, sizeof why);
    EXPECT(safe && strstr(r.body, "<a href=\"https://example.org/x\">ok</a>") && strstr(r.body, "<a href=\"/lexicon/zero\">rel</a>") &&
           strstr(r.body, "href=\"/lexicon/zero\">ZeRO") && strstr(r.body, "<details><summary>S</summary>") == NULL,
           "hostile markdown: no javascript:, vbscript: or data: link, no script, no event handler, in any spelling; "
           "https and site links kept (%d %s)", r.status, why);
    resp_free(&r);
    // Our own lessons keep their folded answers.
    r = request("GET", "/lessons/02-where-memory-goes", NULL, NULL);
    EXPECT(r.status == 200 && strstr(r.body, "<details><summary>Answer</summary>") && article_safe(r.body, why, sizeof why),
           "a lesson's folded answers (<details><summary>) still render (%d %s)", r.status, why);
    resp_free(&r);
}

// ---------------------------------------------------------------------------------------
// 3. Acting needs the token, this site, this host

static int runs_count(void) {
    int n = 0;
    DIR *d = opendir(runs_dir);
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void check_safety(void) {
    char with_token[200], foreign[300], own[300];
    snprintf(with_token, sizeof with_token, "X-Shardlab-Token: %s\r\n", token);
    snprintf(foreign, sizeof foreign, "X-Shardlab-Token: %s\r\nOrigin: http://evil.example\r\n", token);
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", token, port);
    const char *good = "{\"lab\":\"ddp\",\"n\":2,\"steps\":3}";
    int before = runs_count();
    Resp r = request("POST", "/api/runs", NULL, good);
    EXPECT(r.status == 403, "POST /api/runs without the token: 403 (%d)", r.status);
    resp_free(&r);
    r = request("POST", "/api/runs", "X-Shardlab-Token: 0123456789abcdef0123456789abcdef\r\n", good);
    EXPECT(r.status == 403, "POST /api/runs with a wrong token: 403 (%d)", r.status);
    resp_free(&r);
    r = request("POST", "/api/runs", foreign, good);
    EXPECT(r.status == 403, "POST /api/runs with the token but from another site's page (Origin): 403 (%d)", r.status);
    resp_free(&r);
    char req[1024];
    int n = snprintf(req, sizeof req, "POST /api/runs HTTP/1.1\r\nHost: evil.example:%d\r\nConnection: close\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", port, with_token, strlen(good), good);
    r = request_raw(req, (size_t)n);
    EXPECT(r.status == 403, "a request naming another Host (DNS rebinding): 403 (%d)", r.status);
    resp_free(&r);

    const char *bad[] = {
        "{\"lab\":\"rm -rf /\",\"n\":2,\"steps\":3}",
        "{\"lab\":\"ddp\",\"n\":9,\"steps\":3}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":0}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"bogus\":1}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"sync\":\"overlap; rm -rf /\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"batch\":99999}}",
        "{\"lab\":\"ckpt\",\"n\":2,\"steps\":3,\"options\":{\"policy\":\"--run-dir\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"run-dir\":\"/tmp\"}}",
        "not json",
        "[1,2]",
    };
    int ok400 = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = request("POST", "/api/runs", own, bad[i]);
        if (r.status == 400 && strstr(r.body, "\"error\"")) ok400++;
        else printf("# %s: %d %s\n", bad[i], r.status, r.body ? r.body : "");
        resp_free(&r);
    }
    EXPECT(ok400 == (int)(sizeof bad / sizeof bad[0]), "bad labs and options (%zu kinds): 400 with a reason", sizeof bad / sizeof bad[0]);
    // The form and the API hold the labs' own bounds (common/harness/catalog.c), not copies of them:
    // ddp's --bucket-mb is 1e-06 to 1024 in the page, and 2000 is refused in the lab's words.
    Resp form = request("GET", "/labs/ddp", NULL, NULL);
    r = request("POST", "/api/runs", own, "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"bucket-mb\":2000}}");
    EXPECT(form.body && strstr(form.body, "name=\"bucket-mb\" min=\"1e-06\" max=\"1024\"") && r.status == 400 && r.body &&
               strstr(r.body, "--bucket-mb must be between 1e-06 and 1024"),
           "the lab form's bounds and POST /api/runs' refusal are the catalog's (%d %s)", r.status, r.body ? r.body : "");
    resp_free(&form);
    resp_free(&r);
    // Inside every field's bounds, but more memory than the machine has: attention over 1024
    // tokens in 64 heads keeps 4 B NH T^2 = 1 TiB of probabilities for a batch of 4096. The
    // labs' own estimate refuses it here too, with the figures, before a run is started.
    const char *huge = "{\"lab\":\"single\",\"n\":1,\"steps\":1,\"options\":{\"dim\":64,\"heads\":64,\"layers\":1,"
                       "\"batch\":4096,\"seq\":1024}}";
    r = request("POST", "/api/runs", own, huge);
    EXPECT(r.status >= 400 && r.status < 500 && r.body && strstr(r.body, "needs") && strstr(r.body, "GiB") &&
               strstr(r.body, "available"),
           "a configuration inside the form's bounds that the machine cannot hold: 4xx with the memory it needs and "
           "the memory available (%d %s)", r.status, r.body ? r.body : "");
    resp_free(&r);
    // A batch or a mesh that does not divide over the ranks: 400 with the lab's own line
    // (common/harness/batchsplit.c, the check the lab makes), naming the nearest ranks and values that
    // divide, the one line the form shows. Broken variant (runs_start.c without the check):
    // 201, a run that fails at start, its page listing the error once per rank.
    const struct {
        const char *body, *line;
    } split[] = {
        {"{\"lab\":\"ddp\",\"n\":3,\"steps\":3}",
         "--batch 8 does not divide over 3 ranks (each rank takes B/N sequences): use 2 or 4 ranks, or --batch 6 or 9"},
        {"{\"lab\":\"zero\",\"n\":4,\"steps\":3,\"options\":{\"batch\":\"12\",\"accum\":\"2\"}}",
         "--accum 2 does not divide the 3 sequences of each rank (--batch 12 over 4 ranks): use 3 or 6 ranks, --batch 8 or 16, "
         "or --accum 1 or 3"},
        {"{\"lab\":\"single\",\"n\":1,\"steps\":3,\"options\":{\"batch\":6,\"accum\":4}}",
         "--accum 4 does not divide --batch 6 (each micro-batch must have the same size): use --batch 4 or 8, or --accum 3 or 6"},
        {"{\"lab\":\"tp\",\"n\":3,\"steps\":3}", "3 tensor-parallel ranks do not divide --heads 4: use 2 or 4 ranks"},
        {"{\"lab\":\"pp\",\"n\":2,\"steps\":3,\"options\":{\"micro\":3}}",
         "--batch 8 does not split into 1 pipeline(s) x 3 micro-batches of equal size: use --batch 6 or 9, or --micro 2 or 4"},
    };
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
        r = request("POST", "/api/runs", own, split[i].body);
        char want[600];
        snprintf(want, sizeof want, "{\"error\":\"%s\"}", split[i].line);
        EXPECT(r.status == 400 && r.body && strstr(r.body, want), "%s: 400 with the lab's line and the fix (%d %s)",
               split[i].body, r.status, r.body ? r.body : "");
        resp_free(&r);
    }
    EXPECT(runs_count() == before, "none of the refused requests started anything (%d runs before, %d after)", before,
           runs_count());
}

// A header the checks read, sent twice, is ambiguous: CivetWeb hands the handlers the first,
// and a proxy in front might pass on the last. Each is 400 naming the header, before any
// check reads it, and nothing starts. Broken variant (the first one wins): GET with a second,
// foreign Host is 200; a POST with our Origin and a foreign one starts a run.
static void check_twice_headers(void) {
    const char *good = "{\"lab\":\"ddp\",\"n\":2,\"steps\":3}";
    struct {
        const char *name, *method, *lines;
    } cases[] = {
        {"Host", "GET", "Host: 127.0.0.1:%1$d\r\nHost: evil.example\r\n"},
        {"Host", "GET", "Host: 127.0.0.1:%1$d\r\nhost: 127.0.0.1:%1$d\r\n"},
        {"Origin", "POST", "Host: 127.0.0.1:%1$d\r\nX-Shardlab-Token: %2$s\r\nOrigin: http://127.0.0.1:%1$d\r\n"
                           "Origin: http://evil.example\r\n"},
        {"X-Shardlab-Token", "POST", "Host: 127.0.0.1:%1$d\r\nX-Shardlab-Token: 0123\r\nX-Shardlab-Token: %2$s\r\n"},
        {"Cookie", "POST", "Host: 127.0.0.1:%1$d\r\nCookie: shardlab_token=0123\r\nCookie: shardlab_token=%2$s\r\n"},
        {"Content-Length", "POST", "Host: 127.0.0.1:%1$d\r\nX-Shardlab-Token: %2$s\r\nContent-Length: 9999\r\n"},
    };
    int before = runs_count(), refused = 0, n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char lines[600], req[2000], want[200];
        snprintf(lines, sizeof lines, cases[i].lines, port, token);
        int post = strcmp(cases[i].method, "POST") == 0, k;
        if (post)
            k = snprintf(req, sizeof req, "POST /api/runs HTTP/1.1\r\n%sConnection: close\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s", lines, strlen(good), good);
        else k = snprintf(req, sizeof req, "GET / HTTP/1.1\r\n%sConnection: close\r\n\r\n", lines);
        Resp r = request_raw(req, (size_t)k);
        snprintf(want, sizeof want, "two %s headers", cases[i].name);
        if (r.status == 400 && r.body && strstr(r.body, want)) refused++;
        else printf("# %s twice: %d %s\n", cases[i].name, r.status, one_line(r.body ? r.body : ""));
        resp_free(&r);
    }
    // Each case names the header it repeats, in any case of its name; the same requests with
    // it once are served (the controls below), so the refusal is the repetition's.
    EXPECT(refused == n && runs_count() == before, "a request with Host, Origin, the token, the cookie or Content-Length "
           "twice: 400 naming it, nothing started (%d of %d; %d runs before, %d after)", refused, n, before, runs_count());
    EXPECT(get_status("/") == 200, "the same page with one Host: 200");
}

// ---------------------------------------------------------------------------------------
// A run whose training diverged: its log holds NaN as the schema writes it ("NaN"), and the
// server's list, description and events of it are JSON a browser can parse.

// A fixture run: its directory runs_dir/id (in dir) and its meta.json: lab, its world and
// steps, the rest as a lab writes it.
static void fixture_run(char *dir, size_t n, const char *id, const char *lab, int world, int steps) {
    char path[1000], text[600];
    snprintf(dir, n, "%s/%s", runs_dir, id);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    snprintf(text, sizeof text,
             "{\"lab\":\"%s\",\"argv\":[\"%s\"],\"world_size\":%d,\"device\":\"cpu\",\"backend\":\"%s\","
             "\"config\":{\"steps\":%d},\"start_time\":\"2026-01-01T00:00:00Z\",\"start_unix_us\":1}\n",
             lab, lab, world, world > 1 ? "shm" : "none", steps);
    write_text(path, "w", text);
}

// Runs without training steps, listed for what they are: one that stopped before it started
// (no meta.json; the launcher's end events) by its name's lab and "started":false, and a lab
// that trains nothing (collectives) with "trains":false, so the home page shows neither as
// "-1 steps, loss 0".
static void check_runs_without_steps(void) {
    char dir[900], path[1000], err[128];
    snprintf(dir, sizeof dir, "%s/ddp-20260101-000002-0dea", runs_dir);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    write_text(path, "w",
               "{\"ev\":\"error\",\"rank\":0,\"msg\":\"rank 0 failed (exit 2) without writing an end event (written by "
               "shardlab run): ddp: --batch 8 does not divide over 3 ranks\"}\n"
               "{\"ev\":\"end\",\"rank\":0,\"status\":\"error\",\"steps\":0}\n");
    fixture_run(dir, sizeof dir, "collectives-20260101-000003-0c0c", "collectives", 2, 0);
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    write_text(path, "w", "{\"ev\":\"end\",\"rank\":0,\"status\":\"ok\",\"steps\":0}\n");
    Resp r = request("GET", "/api/runs", NULL, NULL);
    JsonValue *list = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    const JsonValue *runs = json_get(list, "runs"), *unstarted = NULL, *coll = NULL;
    for (size_t i = 0; runs && i < runs->count; i++) {
        const JsonValue *id = json_get(json_at(runs, i), "id");
        if (id && id->type == JSON_STRING && !strcmp(id->string, "ddp-20260101-000002-0dea")) unstarted = json_at(runs, i);
        if (id && id->type == JSON_STRING && !strcmp(id->string, "collectives-20260101-000003-0c0c")) coll = json_at(runs, i);
    }
    const JsonValue *lab = json_get(unstarted, "lab"), *started = json_get(unstarted, "started");
    EXPECT(lab && lab->type == JSON_STRING && !strcmp(lab->string, "ddp") && started && started->type == JSON_BOOL && !started->boolean,
           "GET /api/runs: a run that never started is listed as ddp, \"started\":false (%.200s)", r.body ? r.body : "");
    const JsonValue *trains = json_get(coll, "trains");
    EXPECT(trains && trains->type == JSON_BOOL && !trains->boolean,
           "GET /api/runs: a collectives run is listed with \"trains\":false");
    json_free(list);
    resp_free(&r);
    // Proves: a run's own description says whether its lab trains, so its page draws the
    // collectives' figure from the start instead of empty loss, step time and memory panels;
    // a run of a training lab says true, even one that never started (its name's lab).
    const char *ids[2] = {"collectives-20260101-000003-0c0c", "ddp-20260101-000002-0dea"};
    for (int i = 0; i < 2; i++) {
        char url[200];
        snprintf(url, sizeof url, "/api/runs/%s", ids[i]);
        r = request("GET", url, NULL, NULL);
        JsonValue *info = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
        trains = json_get(info, "trains");
        EXPECT(trains && trains->type == JSON_BOOL && trains->boolean == (i == 1), "GET %s: \"trains\":%s (%.200s)", url,
               i ? "true" : "false", r.body ? r.body : "");
        json_free(info);
        resp_free(&r);
    }
}

static void check_nonfinite_run(void) {
    const char *id = "single-20260101-000000-0bad";
    char dir[900], path[1000];
    fixture_run(dir, sizeof dir, id, "single", 1, 5);
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    write_text(path, "w",
               "{\"ev\":\"start\",\"rank\":0,\"world\":1,\"lab\":\"single\",\"device\":\"cpu\",\"backend\":\"none\","
               "\"params\":10,\"config\":{\"steps\":5},\"loss_floor\":1.2}\n"
               "{\"ev\":\"step\",\"rank\":0,\"step\":1,\"loss\":\"NaN\",\"lr\":0.001,\"tokens\":8,\"ms\":{\"step\":1,"
               "\"work\":1,\"compute\":1,\"comm\":0},\"bytes\":{\"sent\":0,\"recv\":0},\"mem\":{\"params\":40,\"grads\":40,"
               "\"optim\":80,\"acts\":8,\"comm\":0,\"peak\":200},\"param_hash\":\"0123456789abcdef\",\"grad_norm\":\"Infinity\"}\n"
               "{\"ev\":\"error\",\"rank\":0,\"msg\":\"step 1: the loss is NaN\"}\n"
               "{\"ev\":\"end\",\"rank\":0,\"status\":\"error\",\"steps\":1}\n");
    char err[128], url[300];
    Resp r = request("GET", "/api/runs", NULL, NULL);
    JsonValue *list = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    const char *entry = r.body ? strstr(r.body, id) : NULL;
    // The list stays JSON with the run's NaN loss in it, spelled as the schema spells it.
    EXPECT(list && entry && strstr(entry, "\"loss\":\"NaN\""), "GET /api/runs with a NaN run: valid JSON, its loss "
           "\"NaN\" (%d %s)", r.status, list ? "" : err);
    json_free(list);
    resp_free(&r);
    snprintf(url, sizeof url, "/api/runs/%s", id);
    r = request("GET", url, NULL, NULL);
    JsonValue *one = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    EXPECT(one != NULL, "GET /api/runs/<id> of the NaN run: 200 and valid JSON (%d)", r.status);
    json_free(one);
    resp_free(&r);
    snprintf(url, sizeof url, "/api/runs/%s/events?from=0", id);
    r = request("GET", url, NULL, NULL);
    JsonValue *events = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    EXPECT(events && strstr(r.body, "\"grad_norm\":\"Infinity\""),
           "GET /api/runs/<id>/events: valid JSON, the step's non-finite numbers as strings (%d %s)", r.status,
           events ? "" : err);
    json_free(events);
    resp_free(&r);
}

// A run's timeline for Perfetto (GET /api/runs/<id>/trace, command/runs/trace.h): 200, Chrome
// trace-event JSON with one complete event per span of the logs and every rank a named
// process, as a download named after the run; 404 for a run that is not there, 409 for a
// directory that holds no run yet (no meta.json), 405 for anything but GET; the run's page
// links it. Broken variant: without the route in api.c, the first check fails (404).
static void check_trace(void) {
    const char *id = "ddp-20260101-000004-7ace", *empty = "ddp-20260101-000005-0e0e";
    char dir[900], path[1000], text[1600], url[300], err[128], want[300];
    fixture_run(dir, sizeof dir, id, "ddp", 2, 1);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        snprintf(text, sizeof text,
                 "{\"ev\":\"span\",\"rank\":%d,\"step\":1,\"name\":\"fwd\",\"mb\":0,\"layer\":1,\"t0_us\":1000,\"t1_us\":1500,"
                 "\"bytes\":0}\n"
                 "{\"ev\":\"span\",\"rank\":%d,\"step\":1,\"name\":\"all_reduce\",\"mb\":-1,\"layer\":-1,\"t0_us\":1600,"
                 "\"t1_us\":1900,\"bytes\":4096,\"algo\":\"ring\\\"\"}\n"
                 "{\"ev\":\"step\",\"rank\":%d,\"step\":1,\"loss\":5.5,\"lr\":0.001,\"tokens\":8,\"ms\":{\"step\":1,"
                 "\"work\":1,\"compute\":1,\"comm\":0},\"bytes\":{\"sent\":4096,\"recv\":4096},\"mem\":{\"params\":40,"
                 "\"grads\":40,\"optim\":80,\"acts\":8,\"comm\":0,\"peak\":200},\"param_hash\":\"0123456789abcdef\"}\n",
                 r, r, r);
        write_text(path, "w", text);
    }
    snprintf(url, sizeof url, "/api/runs/%s/trace", id);
    Resp r = request("GET", url, NULL, NULL);
    char *body_at = r.all ? strstr(r.all, "\r\n\r\n") : NULL;
    if (body_at) *body_at = 0;  // the headers alone, for the search below
    snprintf(want, sizeof want, "Content-Disposition: attachment; filename=\"%s-trace.json\"", id);
    int headers_ok = r.all && strstr(r.all, want) && strstr(r.all, "Content-Type: application/json");
    if (body_at) *body_at = '\r';
    JsonValue *doc = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    const JsonValue *events = json_get(doc, "traceEvents");
    int spans = 0, named = 0, counters = 0;
    for (size_t i = 0; events && i < events->count; i++) {
        const JsonValue *e = json_at(events, i), *ph = json_get(e, "ph"), *name = json_get(e, "name");
        if (!ph || ph->type != JSON_STRING || !name || name->type != JSON_STRING) continue;
        spans += !strcmp(ph->string, "X");
        counters += !strcmp(ph->string, "C");
        named += !strcmp(ph->string, "M") && !strcmp(name->string, "process_name");
    }
    EXPECT(r.status == 200 && headers_ok && events && events->type == JSON_ARRAY && spans == 4 && named == 2 && counters > 0,
           "GET /api/runs/<id>/trace: 200, a JSON download named <id>-trace.json, 4 spans, 2 named ranks, counters "
           "(%d, %d spans, %d named, %s)", r.status, spans, named, doc ? "JSON" : err);
    json_free(doc);
    resp_free(&r);
    EXPECT(get_status("/api/runs/no-such-run-here/trace") == 404, "GET /api/runs/<unknown>/trace: 404");
    snprintf(dir, sizeof dir, "%s/%s", runs_dir, empty);
    mkdir(dir, 0755);
    snprintf(url, sizeof url, "/api/runs/%s/trace", empty);
    r = request("GET", url, NULL, NULL);
    EXPECT(r.status == 409 && r.body && strstr(r.body, "meta.json"),
           "GET /api/runs/<id>/trace of a directory with no run in it yet: 409 naming meta.json (%d %.200s)", r.status,
           r.body ? r.body : "");
    resp_free(&r);
    snprintf(url, sizeof url, "/api/runs/%s/trace", id);
    r = request("POST", url, NULL, "{}");
    EXPECT(r.status == 405, "POST /api/runs/<id>/trace: 405 (%d)", r.status);
    resp_free(&r);
    snprintf(url, sizeof url, "/runs/%s", id);
    r = request("GET", url, NULL, NULL);
    snprintf(want, sizeof want, "<p class=\"run-trace\"><a href=\"/api/runs/%s/trace\" download>Download the timeline (Perfetto)",
             id);
    EXPECT(r.status == 200 && r.body && strstr(r.body, want), "the run's page links the timeline for Perfetto");
    resp_free(&r);
    // Proves: a run with no timeline (no meta.json: the trace is 409) is not offered one: the
    // link is hidden until run.js sees the run start (broken variant: a dead link to a 409).
    snprintf(url, sizeof url, "/runs/%s", empty);
    r = request("GET", url, NULL, NULL);
    EXPECT(r.status == 200 && r.body && strstr(r.body, "<p class=\"run-trace\" hidden><a href="),
           "the page of a run with no timeline yet: the Perfetto link hidden (%d)", r.status);
    resp_free(&r);
}

// Rank 0 writes summary.json as it finishes; rank 1 may write its end a moment later. A stream
// opened in between must not end before it, nor call the run stopped: here rank 1's end comes
// 1.2 s after summary.json (a child appends it while the stream is open). The run is "ok" and
// the stream carries all 5 events (it ended after 3, the run "stopped", when summary.json alone ended
// a run).
static char *stream(const char *id, long from, long last_id, double max_s);

static void check_summary_before_last_rank(void) {
    const char *id = "ddp-20260101-000003-5a5a";
    char dir[900], path[1000];
    fixture_run(dir, sizeof dir, id, "ddp", 2, 1);
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, k);
        char text[600];
        snprintf(text, sizeof text,
                 "{\"ev\":\"start\",\"rank\":%d,\"world\":2,\"lab\":\"ddp\",\"device\":\"cpu\",\"backend\":\"shm\","
                 "\"params\":10,\"config\":{\"steps\":1},\"loss_floor\":1.2}\n%s", k,
                 k == 0 ? "{\"ev\":\"end\",\"rank\":0,\"status\":\"ok\",\"steps\":1}\n" : "");
        write_text(path, "w", text);
    }
    snprintf(path, sizeof path, "%s/summary.json", dir);
    write_text(path, "w", "{\"status\":\"ok\",\"steps\":1}\n");
    fflush(stdout);
    pid_t late = fork();
    if (late == 0) {
        usleep(1200000);
        snprintf(path, sizeof path, "%s/rank-1.jsonl", dir);
        write_text(path, "a", "{\"ev\":\"step\",\"rank\":1,\"step\":1,\"loss\":5.5,\"lr\":0.001,\"tokens\":8,"
                              "\"ms\":{\"step\":1,\"work\":1,\"compute\":1,\"comm\":0},\"bytes\":{\"sent\":0,\"recv\":0},"
                              "\"mem\":{\"params\":40,\"grads\":40,\"optim\":80,\"acts\":8,\"comm\":0,\"peak\":200},"
                              "\"param_hash\":\"0123456789abcdef\"}\n{\"ev\":\"end\",\"rank\":1,\"status\":\"ok\",\"steps\":1}\n");
        _exit(0);
    }
    char *text = stream(id, 0, -1, 20);
    waitpid(late, NULL, 0);
    int events = 0;
    for (char *p = text; (p = strstr(p, "\nid: ")); p++) events++;
    EXPECT(events == 5 && strstr(text, "\"rank\":1,\"status\":\"ok\"") && strstr(text, "event: end\ndata: {\"status\":\"ok\"}"),
           "summary.json written before rank 1's end: the stream waits for it, all 5 events and the end \"ok\" (%d events)",
           events);
    free(text);
}

// Numbers from requests: headers and queries out of range, spelled oddly or not numbers at
// all are a 400 with a reason, never arithmetic that overflows (the server runs under UBSan).
// Broken variant: Last-Event-ID + 1 computed on whatever strtol made of the header.
static void check_request_numbers(void) {
    const char *id = "single-20260101-000000-0bad";  // (check_nonfinite_run's: it has ended)
    const char *last_ids[] = {"9223372036854775807", "99999999999999999999999", "-1", "-9223372036854775808", "12abc",
                              "0x10", "1e3"};
    int refused = 0;
    for (size_t i = 0; i < sizeof last_ids / sizeof last_ids[0]; i++) {
        char path[300], hdr[200];
        snprintf(path, sizeof path, "/api/runs/%s/stream", id);
        snprintf(hdr, sizeof hdr, "Last-Event-ID: %s\r\n", last_ids[i]);
        Resp r = request("GET", path, hdr, NULL);
        if (r.status == 400 && strstr(r.body, "Last-Event-ID")) refused++;
        else printf("# Last-Event-ID %s: %d\n", last_ids[i], r.status);
        resp_free(&r);
    }
    EXPECT(refused == (int)(sizeof last_ids / sizeof last_ids[0]) && get_status("/") == 200,
           "Last-Event-ID too large to add 1 to, negative or not a number (%zu spellings): 400 naming it, the server goes on",
           sizeof last_ids / sizeof last_ids[0]);
    const char *queries[] = {"from=9223372036854775808", "from=-5", "from=abc", "rank=4294967296", "rank=-2", "rank=1e3",
                             "from=1&rank=99999999999999999999"};
    refused = 0;
    for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
        char path[300];
        snprintf(path, sizeof path, "/api/runs/%s/events?%s", id, queries[i]);
        Resp r = request("GET", path, NULL, NULL);
        if (r.status == 400 && strstr(r.body, "\"error\"")) refused++;
        else printf("# %s: %d\n", queries[i], r.status);
        resp_free(&r);
    }
    char path[300];
    snprintf(path, sizeof path, "/api/runs/%s/stream?from=9223372036854775807", id);
    Resp r = request("GET", path, NULL, NULL);
    int stream_refused = r.status == 400;
    resp_free(&r);
    EXPECT(refused == (int)(sizeof queries / sizeof queries[0]) && stream_refused,
           "events?from= and rank= out of range or not whole numbers, and stream?from= past any index: 400 (%d of %zu)",
           refused, sizeof queries / sizeof queries[0]);
}

// Numbers in a run's files are untrusted too: a step or a steps count too large for an integer
// is shown as unknown, not converted (the conversion is undefined; UBSan stops the server).
static void check_run_file_numbers(void) {
    const char *id = "single-20260101-000001-0bad";
    char dir[900], path[1000];
    snprintf(dir, sizeof dir, "%s/%s", runs_dir, id);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    write_text(path, "w", "{\"lab\":\"single\",\"world_size\":1,\"config\":{\"steps\":1e300},\"start_time\":\"x\"}\n");
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    write_text(path, "w", "{\"ev\":\"step\",\"rank\":0,\"step\":-1e300,\"loss\":1}\n{\"ev\":\"end\",\"rank\":1e300,\"status\":\"ok\"}\n");
    Resp r = request("GET", "/api/runs", NULL, NULL);
    const char *entry = r.body ? strstr(r.body, id) : NULL;
    EXPECT(r.status == 200 && entry && strstr(entry, "\"steps\":0") && strstr(entry, "\"last_step\":-1") &&
           get_status("/") == 200, "GET /api/runs with a run whose steps and step are 1e300: 200, shown as unknown (%d)",
           r.status);
    resp_free(&r);
}

// Numbers in a lab's options: finite, in the field's bounds, in plain decimal. strtod alone
// takes "nan", "inf" and hex, and NaN passes every comparison with a bound. Broken variant:
// field_value() checking the bounds on strtod's result alone.
static void check_option_numbers(void) {
    char own[300];
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", token, port);
    const char *bad[] = {
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"lr\":\"nan\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"lr\":\"NaN\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"lr\":\"-nan\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"lr\":\"inf\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"lr\":\"1e999\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"lr\":\"0x1p-4\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"lr\":\" 0.01\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"lr\":1e999}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"bucket-mb\":\"nan\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"bucket-mb\":\"infinity\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"seed\":\"nan\"}}",
        "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"seed\":\"1e300\"}}",
        "{\"lab\":\"shard\",\"n\":2,\"steps\":3,\"options\":{\"temperature\":\"NAN\"}}",
    };
    int before = runs_count(), ok400 = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Resp r = request("POST", "/api/runs", own, bad[i]);
        if (r.status == 400 && strstr(r.body, "\"error\"")) ok400++;
        else printf("# %s: %d %s\n", bad[i], r.status, r.body ? r.body : "");
        resp_free(&r);
    }
    EXPECT(ok400 == (int)(sizeof bad / sizeof bad[0]) && runs_count() == before,
           "options that are NaN, infinite, hex, padded or out of range, as strings or numbers (%zu kinds): 400, nothing "
           "started (%d of them)", sizeof bad / sizeof bad[0], ok400);
}

// ---------------------------------------------------------------------------------------
// Holding threads: slow bodies, many streams, clients that leave, runs whose launcher died

// A POST with the token whose body does not come (fewer bytes than Content-Length, or one
// byte every half second): the server answers within its request timeout (2 s here) and
// closes the connection, whatever the client does. Broken variant: mg_read() called until
// the body is whole, each call waiting the whole timeout again after every byte.
static void check_slow_body(void) {
    char tok[64];
    int slow_port, main_port = port;
    char *opts[] = {"--port", "0", "--request-timeout", "2", NULL};
    pid_t slow = start_extra("slowbody", opts, runs_dir, &slow_port, tok);
    port = slow_port;
    double took[2] = {99, 99}, closed[2] = {99, 99};
    for (int drip = 0; drip < 2 && slow_port; drip++) {
        int fd = connect_server();
        if (fd < 0) break;
        char req[600];
        int n = snprintf(req, sizeof req, "POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Shardlab-Token: %s\r\n"
                         "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"lab\"", slow_port, tok);
        double t0 = now_s();
        if (write(fd, req, (size_t)n) != n) printf("# write failed\n");
        char buf[4096];
        size_t got = 0;
        while (now_s() - t0 < 12) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 500) > 0) {
                ssize_t k = read(fd, buf + got, sizeof buf - got - 1);
                if (k <= 0) {
                    closed[drip] = now_s() - t0;
                    break;
                }
                got += (size_t)k;
                buf[got] = 0;
                if (took[drip] == 99 && strstr(buf, "\r\n\r\n")) took[drip] = now_s() - t0;
            } else if (drip && write(fd, " ", 1) != 1) {  // a byte every half second
                break;
            }
        }
        close(fd);
    }
    int alive = slow_port && get_status("/") == 200;
    port = main_port;
    stop_extra(slow);
    EXPECT(took[0] < 3.5 && closed[0] < 3.5 && took[1] < 3.5 && closed[1] < 3.5 && alive,
           "a body shorter than its Content-Length, and one sent a byte every 0.5 s: answered and closed within the 2 s "
           "request timeout (answered %.1f s and %.1f s, closed %.1f s and %.1f s), the server still answers",
           took[0], took[1], closed[0], closed[1]);
}

static char *stream(const char *id, long from, long last_id, double max_s);

// A run that goes on (its log written a moment ago, no end), for streams to stay open on.
static void make_live_run(const char *id) {
    char dir[900], path[1000];
    snprintf(dir, sizeof dir, "%s/%s", runs_dir, id);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    write_text(path, "w", "{\"lab\":\"single\",\"world_size\":1,\"config\":{\"steps\":5},\"start_time\":\"x\"}\n");
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    write_text(path, "w", "{\"ev\":\"start\",\"rank\":0,\"world\":1,\"lab\":\"single\"}\n");
}

// Opens n streams on run id; each answered 200 counts in *ok, 503 with a Retry-After in
// *busy; fds[] keeps the open connections (-1 for those not opened). One unanswered within
// 2 s (every thread held) ends the opening: the next would wait as long.
static void open_streams(const char *id, int n, int *fds, int *ok, int *busy) {
    *ok = *busy = 0;
    for (int i = 0; i < n; i++) fds[i] = -1;
    for (int i = 0; i < n; i++) {
        fds[i] = connect_server();
        if (fds[i] < 0) continue;
        char req[512], buf[512];
        int k = snprintf(req, sizeof req, "GET /api/runs/%s/stream HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", id, port);
        if (write(fds[i], req, (size_t)k) != k) continue;
        struct timeval tv = {2, 0};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t got = read(fds[i], buf, sizeof buf - 1);
        buf[got > 0 ? got : 0] = 0;
        if (strncmp(buf, "HTTP/1.1 200", 12) == 0) ++*ok;
        else if (strncmp(buf, "HTTP/1.1 503", 12) == 0 && strstr(buf, "Retry-After:")) ++*busy;
        else if (got <= 0) break;
    }
}

// Streams hold a thread each until their client leaves: the server takes only so many (503
// with a Retry-After for more), so pages and the API always have threads; a client that
// closes its stream frees its thread within about a second, not at the next keep-alive.
// Broken variants: no cap (the 65th stream and every request after it wait); a gone client
// noticed only when the 10 s keep-alive write fails.
static void check_stream_limits(void) {
    const char *id = "single-20260101-000002-11fe";
    make_live_run(id);
    enum { MANY = 70 };
    int fds[MANY], ok, busy;
    open_streams(id, MANY, fds, &ok, &busy);
    recv_timeout_s = 5;
    double t0 = now_s();
    int listed = get_status("/api/runs") == 200;
    double took = now_s() - t0;
    recv_timeout_s = 10;
    EXPECT(ok >= 50 && busy > 0 && ok + busy == MANY && listed,
           "%d streams on a live run: %d open, %d answered 503 with a Retry-After, none left waiting; GET /api/runs "
           "answered meanwhile in %.1f s", MANY, ok, busy, took);
    for (int i = 0; i < MANY; i++)
        if (fds[i] >= 0) close(fds[i]);
    usleep(1500000);
    int first = ok;
    t0 = now_s();
    open_streams(id, first, fds, &ok, &busy);
    took = now_s() - t0;
    for (int i = 0; i < first; i++)
        if (fds[i] >= 0) close(fds[i]);
    EXPECT(first > 0 && ok == first && busy == 0 && took < 5, "1.5 s after their clients closed them, the streams' threads "
           "are free: %d of %d opened again at once (%.1f s), %d refused", ok, first, took, busy);
}

// The pid of the launcher this server started for run directory dir (its command line holds
// "--run-dir" dir), or 0.
static pid_t launcher_of(const char *dir) {
    pid_t found = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char path[300], buf[8192];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = 0;
        int is_run = 0, dir_next = 0;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
            if (dir_next && strcmp(buf + i, dir) == 0) found = (pid_t)atoi(e->d_name);
            dir_next = strcmp(buf + i, "--run-dir") == 0;
            is_run |= strcmp(buf + i, "run") == 0;
        }
        if (!is_run) found = 0;
    }
    if (d) closedir(d);
    return found;
}

// A run whose launcher died (killed, with its ranks) has ended for every reader at once: the
// list and the run's description say "stopped", its events are done, and its stream sends
// its end and closes. Broken variant: the list waiting for 2 minutes of silence, the run and
// its stream for every rank's end event, which never comes.
static void check_dead_run(void) {
    char own[300], id[256] = "", dir[900];
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", token, port);
    Resp r = request("POST", "/api/runs", own, "{\"lab\":\"ddp\",\"n\":2,\"steps\":100000}");
    const char *at = r.body ? strstr(r.body, "\"id\":\"") : NULL;
    if (at) sscanf(at + 6, "%255[^\"]", id);
    resp_free(&r);
    snprintf(dir, sizeof dir, "%s/%s", runs_dir, id);
    char log[1000];
    snprintf(log, sizeof log, "%s/rank-0.jsonl", dir);
    int stepping = 0;
    for (double t0 = now_s(); id[0] && !stepping && now_s() - t0 < 60; usleep(200000)) {
        char *text = read_file(log, NULL);
        stepping = text && strstr(text, "\"ev\":\"step\"");
        free(text);
    }
    pid_t launcher = stepping ? launcher_of(dir) : 0;
    if (launcher) kill(launcher, SIGKILL);
    pid_t pids[16];
    for (int round = 0; round < 20 && run_procs(dir, -1, pids, 16) > 0; round++) {
        int k = run_procs(dir, -1, pids, 16);
        for (int i = 0; i < k && i < 16; i++) kill(pids[i], SIGKILL);
        usleep(100000);
    }
    usleep(500000);  // (the server reaps its launcher within 0.2 s)
    double t0 = now_s();
    char *text = stream(id, 0, -1, 5);
    double took = now_s() - t0;
    char path[400];
    snprintf(path, sizeof path, "/api/runs/%s", id);
    r = request("GET", path, NULL, NULL);
    int info_stopped = r.status == 200 && strstr(r.body, "\"status\":\"stopped\"");
    resp_free(&r);
    snprintf(path, sizeof path, "/api/runs/%s/events?from=0", id);
    r = request("GET", path, NULL, NULL);
    int events_done = r.status == 200 && strstr(r.body, "\"done\":true") && strstr(r.body, "\"status\":\"stopped\"");
    resp_free(&r);
    r = request("GET", "/api/runs", NULL, NULL);
    const char *entry = r.body ? strstr(r.body, id) : NULL;
    const char *next = entry ? strstr(entry, "{\"id\"") : NULL, *st = entry ? strstr(entry, "\"status\":\"stopped\"") : NULL;
    int listed_stopped = st && (!next || st < next);
    resp_free(&r);
    EXPECT(launcher && strstr(text, "event: end\ndata: {\"status\":\"stopped\"}") && took < 3 && info_stopped && events_done &&
           listed_stopped, "a run whose launcher was killed: its stream ends with status stopped (in %.1f s), and its "
           "description, events and list entry all say stopped (launcher %d; %d %d %d)", took, (int)launcher, info_stopped,
           events_done, listed_stopped);
    free(text);
}

// A run directory with a FIFO in place of its meta.json and rank log (anyone may copy one
// into the runs folder): the list is answered at once, the FIFO refused, not waited on.
static void check_fifo_run(void) {
    const char *id = "single-20260101-000000-f1f0";
    char dir[900], meta[1000], rank0[1000];
    snprintf(dir, sizeof dir, "%s/%s", runs_dir, id);
    snprintf(meta, sizeof meta, "%s/meta.json", dir);
    snprintf(rank0, sizeof rank0, "%s/rank-0.jsonl", dir);
    mkdir(dir, 0755);
    if (mkfifo(meta, 0644) != 0 || mkfifo(rank0, 0644) != 0) {
        EXPECT(0, "mkfifo in %s", dir);
        return;
    }
    double t0 = now_s();
    Resp r = request("GET", "/api/runs", NULL, NULL);
    double took = now_s() - t0;
    EXPECT(r.status == 200 && took < 3, "GET /api/runs with a FIFO as a run's meta.json and log: %d in %.1f s", r.status,
           took);
    resp_free(&r);
    char url[300];
    snprintf(url, sizeof url, "/api/runs/%s/events?from=0", id);
    t0 = now_s();
    r = request("GET", url, NULL, NULL);
    took = now_s() - t0;
    EXPECT(r.status != 0 && took < 3, "GET /api/runs/<id>/events of that run: answered (%d) in %.1f s", r.status, took);
    resp_free(&r);
    // A reader that did wait is let go (a writer comes and goes), and the run removed.
    for (int k = 0; k < 50; k++) {
        int fd = open(meta, O_WRONLY | O_NONBLOCK), fd2 = open(rank0, O_WRONLY | O_NONBLOCK);
        if (fd >= 0) close(fd);
        if (fd2 >= 0) close(fd2);
        usleep(10000);
    }
    unlink(meta), unlink(rank0), rmdir(dir);
}

// Run ids are directory names under runs/, which anything may create. The list shows only
// the ids the pages serve (letters, digits, - _ and ., no "..", at most 200 characters: every
// name the launcher gives), so every id it shows opens; a directory with a quote, a newline,
// a space, ".." or a name too long is left out and counted ("unlisted"), so the home page can
// say why a run copied in under such a name is missing. Serving those names instead would
// put them into URLs, HTML attributes, a download's file name and paths, each needing its own
// quoting. Broken variant (today's list, every name): the quoted and newline names are listed
// and 404 at /runs/<id>.
static void check_unlisted_names(void) {
    char long_name[230];
    memset(long_name, 'x', 220);
    long_name[220] = 0;
    const char *odd[] = {"ddp-quo\"te", "ddp-new\nline", "ddp-sp ace", "ddp-a..b", long_name};
    int n = (int)(sizeof odd / sizeof odd[0]);
    char dir[1200], path[1300];
    for (int i = -1; i < n; i++) {  // (-1: a plain name beside them, which is listed)
        snprintf(dir, sizeof dir, "%s/%s", runs_dir, i < 0 ? "ddp-plain_name.1" : odd[i]);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
        write_text(path, "w", "{\"ev\":\"start\",\"rank\":0,\"world\":1,\"lab\":\"ddp\"}\n");
    }
    Resp r = request("GET", "/api/runs", NULL, NULL);
    char err[128];
    JsonValue *list = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    const JsonValue *runs = json_get(list, "runs"), *unlisted = json_get(list, "unlisted");
    int listed = runs && runs->type == JSON_ARRAY ? (int)runs->count : 0, served = 0, odd_listed = 0, plain = 0;
    for (int i = 0; i < listed; i++) {
        const JsonValue *id = json_get(&runs->items[i], "id");
        if (!id || id->type != JSON_STRING) continue;
        plain += strcmp(id->string, "ddp-plain_name.1") == 0;
        for (int k = 0; k < n; k++) odd_listed += strcmp(id->string, odd[k]) == 0;
        char page[400], api[400];
        snprintf(page, sizeof page, "/runs/%s", id->string);
        snprintf(api, sizeof api, "/api/runs/%s", id->string);
        int ok = get_status(page) == 200 && get_status(api) == 200;
        served += ok;
        if (!ok) printf("# listed but not served: %s\n", one_line(id->string));
    }
    // Every id listed opens, on its page and in the API; none of the odd names is listed, and
    // all of them are counted.
    EXPECT(plain == 1 && served == listed && odd_listed == 0 && unlisted && unlisted->type == JSON_NUMBER &&
               unlisted->number == n,
           "a runs folder with directories named with a quote, a newline, a space, \"..\" and 220 characters, and a "
           "plain one: every one of the %d ids listed opens (%d), the plain one among them, none of the others (%d), "
           "\"unlisted\" counts them (%g of %d)", listed,
           served, odd_listed, unlisted && unlisted->type == JSON_NUMBER ? unlisted->number : -1, n);
    json_free(list);
    resp_free(&r);
    for (int i = -1; i < n; i++) {
        snprintf(dir, sizeof dir, "%s/%s", runs_dir, i < 0 ? "ddp-plain_name.1" : odd[i]);
        snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
        unlink(path);
        rmdir(dir);
    }
}

// ---------------------------------------------------------------------------------------
// 4-5. A run started from the API, its events, its stream

// Every line of every rank's log, counted; and rank 0's lines, for the order.
static int log_lines(const char *dir, int world, char ***rank0) {
    int total = 0;
    for (int k = 0; k < world; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, k);
        char *s = read_file(path, NULL);
        int n = 0;
        for (char *p = s; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
            if (*p != '\n' && *p) n++;
        total += n;
        if (k == 0 && rank0) {
            *rank0 = calloc((size_t)n + 1, sizeof **rank0);
            int i = 0;
            for (char *p = s, *nl; p && *p && i < n; p = nl + 1, i++) {
                nl = strchr(p, '\n');
                if (!nl) break;
                (*rank0)[i] = strndup(p, (size_t)(nl - p));
            }
        }
        free(s);
    }
    return total;
}

// The stream from `from` (or after last_id), read until the end event or `max_s` seconds.
static char *stream(const char *id, long from, long last_id, double max_s) {
    char req[1024];
    int n = snprintf(req, sizeof req, "GET /api/runs/%s/stream?from=%ld HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n", id,
                     from, port);
    if (last_id >= 0) n += snprintf(req + n, sizeof req - (size_t)n, "Last-Event-ID: %ld\r\n", last_id);
    n += snprintf(req + n, sizeof req - (size_t)n, "\r\n");
    int fd = connect_server();
    if (fd < 0) return strdup("");
    if (write(fd, req, (size_t)n) != n) return close(fd), strdup("");
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    struct timeval tv = {0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (double t0 = now_s(); now_s() - t0 < max_s;) {
        ssize_t k = read(fd, buf + len, cap - len - 1);
        if (k == 0) break;
        if (k > 0) {
            len += (size_t)k;
            buf[len] = 0;
            if (strstr(buf, "event: end")) break;
            if (cap - len < 65536) buf = realloc(buf, cap *= 2);
        }
    }
    close(fd);
    buf[len] = 0;
    return buf;
}

// ---------------------------------------------------------------------------------------
// 6. Grading a run

// POST /api/runs/<id>/grade with these headers; grading may take seconds (a reference run).
static Resp post_grade(const char *id, const char *headers) {
    char path[400], hdr[600];
    snprintf(path, sizeof path, "/api/runs/%s/grade", id);
    snprintf(hdr, sizeof hdr, "%sContent-Length: 0\r\n", headers ? headers : "");
    recv_timeout_s = 300;
    Resp r = request("POST", path, hdr, NULL);
    recv_timeout_s = 10;
    return r;
}

// A grade's JSON: its check named `name` ("run.complete"), or NULL.
static const JsonValue *grade_check(const JsonValue *g, const char *name) {
    const JsonValue *checks = json_get(g, "checks");
    for (size_t i = 0; checks && i < checks->count; i++) {
        const JsonValue *n = json_get(json_at(checks, i), "name");
        if (n && n->type == JSON_STRING && strcmp(n->string, name) == 0) return json_at(checks, i);
    }
    return NULL;
}

// Every check of the grade PASS (or SKIP, worth nothing), and points == max > 0.
static int grade_all_pass(const JsonValue *g, int *nchecks) {
    const JsonValue *checks = json_get(g, "checks"), *pts = json_get(g, "points"), *max = json_get(g, "max");
    int ok = checks && checks->type == JSON_ARRAY && checks->count > 0 && pts && max && pts->number == max->number &&
             max->number > 0;
    for (size_t i = 0; ok && i < checks->count; i++) {
        const JsonValue *res = json_get(json_at(checks, i), "result");
        ok = res && res->type == JSON_STRING && (strcmp(res->string, "PASS") == 0 || strcmp(res->string, "SKIP") == 0);
    }
    *nchecks = checks ? (int)checks->count : 0;
    return ok;
}

// A copy of a finished run's directory (its logs, meta.json and summary.json only) as a new run.
static void copy_run(const char *id, const char *new_id) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s' && cp '%s/%s'/meta.json '%s/%s'/summary.json '%s/%s'/rank-*.jsonl '%s/%s/'",
             runs_dir, new_id, runs_dir, id, runs_dir, id, runs_dir, id, runs_dir, new_id);
    if (system(cmd) != 0) printf("# copying the run failed: %s\n", cmd);
}

static void check_grade(const char *id) {
    char own[300], foreign[300], path[400], file[1200];
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", token, port);
    snprintf(foreign, sizeof foreign, "X-Shardlab-Token: %s\r\nOrigin: http://evil.example\r\n", token);
    snprintf(path, sizeof path, "/api/runs/%s/grade", id);
    snprintf(file, sizeof file, "%s/%s/grade.json", runs_dir, id);
    // Copies of the finished run, made before it is graded: one to grade twice at once, one
    // with rank 1's log cut in the middle of a line (a run that died mid-write).
    char twice[300], cut[300], cut_log[1400];
    snprintf(twice, sizeof twice, "%s-twice", id);
    snprintf(cut, sizeof cut, "%s-cut", id);
    copy_run(id, twice);
    copy_run(id, cut);
    snprintf(cut_log, sizeof cut_log, "%s/%s/rank-1.jsonl", runs_dir, cut);
    struct stat st;
    if (stat(cut_log, &st) != 0 || truncate(cut_log, st.st_size / 2) != 0) printf("# cutting %s failed\n", cut_log);

    // (a) Not graded yet: GET says so, with a reason; an unknown run has none either.
    Resp r = request("GET", path, NULL, NULL);
    EXPECT(r.status == 404 && strstr(r.body, "\"error\"") && strstr(r.body, "no grade yet"),
           "GET /api/runs/<id>/grade on a run without grade.json: 404 with a reason (%d)", r.status);
    resp_free(&r);
    EXPECT(get_status("/api/runs/no-such-run/grade") == 404, "GET grade of an unknown run: 404");

    // (b) Grading starts processes: the token and this site, as for starting a lab.
    r = post_grade(id, NULL);
    EXPECT(r.status == 403 && strstr(r.body, "token"), "POST grade without the token: 403 (%d)", r.status);
    resp_free(&r);
    r = post_grade(id, foreign);
    EXPECT(r.status == 403, "POST grade with the token but from another site's page (Origin): 403 (%d)", r.status);
    resp_free(&r);
    EXPECT(access(file, F_OK) != 0, "the refused requests graded nothing (no grade.json)");

    // ... with them, the finished run is graded: the rubric of its lab, every check PASS (the
    // run is the reference lab's own), grade.json and grade.xml written into the run.
    double t0 = now_s();
    r = post_grade(id, own);
    char err[256];
    JsonValue *g = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    int nchecks = 0, all_pass = g && grade_all_pass(g, &nchecks);
    const JsonValue *lab = json_get(g, "lab");
    if (!EXPECT(r.status == 200 && g && json_get(g, "points") && lab && lab->type == JSON_STRING && !strcmp(lab->string, "pp") &&
                all_pass, "POST grade with the token on a finished pp run: 200, its rubric, %d checks all PASS, in %.1f s (%d)",
                nchecks, now_s() - t0, r.status))
        printf("# %s\n", r.body ? r.body : "");
    json_free(g);
    char *written = read_file(file, NULL);
    char xml[1300];
    snprintf(xml, sizeof xml, "%s/%s/grade.xml", runs_dir, id);
    EXPECT(written && r.body && strncmp(written, r.body, strlen(r.body)) == 0 && access(xml, F_OK) == 0,
           "grade.json (the same grade) and grade.xml written into the run's directory");
    resp_free(&r);
    // GET now serves that file.
    r = request("GET", path, NULL, NULL);
    EXPECT(r.status == 200 && written && strcmp(r.body, written) == 0, "GET grade then returns grade.json (%d)", r.status);
    resp_free(&r);
    free(written);

    // Another grader at work on the run (`shardlab grade` holds its lock, common/runfiles/joblock.h):
    // 409, naming it; once it is done, grading goes on. Broken variant: runs_grade.c without
    // the lock, which graded the run under the other grader's feet (200).
    char lock_path[1300];
    snprintf(lock_path, sizeof lock_path, "%s/%s/lock", runs_dir, id);
    int held = open(lock_path, O_RDWR | O_CREAT, 0644);
    int locked = held >= 0 && flock(held, LOCK_EX | LOCK_NB) == 0 && ftruncate(held, 0) == 0 &&
                 write(held, "pid 4242 on elsewhere: shardlab grade RUN\n", 42) == 42;
    r = post_grade(id, own);
    EXPECT(locked && r.status == 409 && strstr(r.body, "in use by another job: pid 4242 on elsewhere: shardlab grade RUN"),
           "POST grade while another grader holds the run: 409 naming it (%d %s)", r.status, r.body ? r.body : "");
    resp_free(&r);
    if (held >= 0) close(held);  // (its lock goes with it)
    r = post_grade(id, own);
    EXPECT(r.status == 200, "...and once it let go, the grade is given (%d)", r.status);
    resp_free(&r);

    // (c) A run that is not there: 404, nothing graded.
    r = post_grade("no-such-run", own);
    EXPECT(r.status == 404 && strstr(r.body, "\"error\""), "POST grade of an unknown run: 404 (%d)", r.status);
    resp_free(&r);

    // Two requests for one run at once: one grades (starting the reference run into
    // ref-single/), the other waits for it and reuses that reference; neither sees the other's
    // half-written reference, so both answer the same full marks.
    fflush(stdout);
    pid_t kid = fork();
    if (kid == 0) {
        Resp k = post_grade(twice, own);
        char out_path[900];
        snprintf(out_path, sizeof out_path, "%s/twice-kid", tmp);
        FILE *f = fopen(out_path, "w");
        if (f) fprintf(f, "%d\n%s", k.status, k.body ? k.body : ""), fclose(f);
        _exit(0);
    }
    Resp mine = post_grade(twice, own);
    waitpid(kid, NULL, 0);
    char kid_path[900];
    snprintf(kid_path, sizeof kid_path, "%s/twice-kid", tmp);
    char *theirs = read_file(kid_path, NULL), *theirs_body = theirs ? strchr(theirs, '\n') : NULL;
    g = mine.status == 200 ? json_parse(mine.body, strlen(mine.body), err, sizeof err) : NULL;
    all_pass = g && grade_all_pass(g, &nchecks);
    if (!EXPECT(mine.status == 200 && theirs && atoi(theirs) == 200 && theirs_body && strcmp(theirs_body + 1, mine.body) == 0 &&
                all_pass, "two POSTs grading one run at once: both 200 with the same grade, every check PASS (%d, %d)",
                mine.status, theirs ? atoi(theirs) : 0))
        printf("# one: %s\n# the other: %s\n", mine.body ? mine.body : "", theirs ? theirs : "no reply");
    json_free(g);
    free(theirs);
    resp_free(&mine);

    // (d) The cut log: the grade still answers (200) and says why: run.complete FAIL, naming
    // rank 1's log; the other checks are not graded. Written like any grade.
    r = post_grade(cut, own);
    g = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    const JsonValue *complete = grade_check(g, "run.complete");
    const JsonValue *res = json_get(complete, "result"), *why = json_get(complete, "reason"), *pass = json_get(g, "pass");
    EXPECT(r.status == 200 && res && res->type == JSON_STRING && !strcmp(res->string, "FAIL") && why &&
           why->type == JSON_STRING && strstr(why->string, "rank-1.jsonl") && pass && pass->type == JSON_BOOL && !pass->boolean,
           "a run whose rank-1.jsonl was cut mid-line: 200, run.complete FAIL naming the log (%s)",
           why && why->type == JSON_STRING ? why->string : r.body ? r.body : "");
    json_free(g);
    resp_free(&r);
    snprintf(file, sizeof file, "%s/%s/grade.json", runs_dir, cut);
    EXPECT(access(file, F_OK) == 0, "and its grade.json is written");
}

// --ref from the browser: a run of this server that has ended, passed to the lab as its
// directory; anything else is 400 and starts nothing. The new run's description names the
// reference, so its dashboard can draw it.
// A lab's form shows each option's default where its field is empty (the placeholder, or
// the select's first choice), the lab's own --layers included; pp's form has no --accum
// (its micro-batches are its accumulation).
// A term's Run button carries the options its Labs line names: zero-stage-3's opens the zero
// lab's form with --stage 3 (lab.js fills the field from the address); a lesson's buttons
// come from its make commands.
static void check_term_options(void) {
    Resp r = request("GET", "/lexicon/zero-stage-3", NULL, NULL);
    int ok = r.status == 200 && r.body && strstr(r.body, "href=\"/labs/zero?stage=3\">Run zero --stage 3</a>");
    resp_free(&r);
    r = request("GET", "/lexicon/sequence-parallelism", NULL, NULL);
    ok = ok && r.status == 200 && r.body && strstr(r.body, "href=\"/labs/tp?sp=1\">Run tp --sp</a>");
    resp_free(&r);
    EXPECT(ok, "a term's Run button carries its options: /labs/zero?stage=3, /labs/tp?sp=1");
    // A lesson's Run buttons: each lab its make commands run, with the first one's variables.
    r = request("GET", "/lessons/05-ddp-from-scratch", NULL, NULL);
    ok = r.status == 200 && r.body && strstr(r.body, "href=\"/labs/single?steps=30\">Run single</a>") &&
         strstr(r.body, "href=\"/labs/ddp?n=2&amp;steps=30\">Run ddp</a>");
    resp_free(&r);
    EXPECT(ok, "a lesson has Run buttons for the labs its commands run (lesson 05: single, ddp with NGPU=2 STEPS=30)");
}

static void check_form_defaults(void) {
    Resp r = request("GET", "/labs/ddp", NULL, NULL);
    int ddp_ok = r.status == 200 && r.body && strstr(r.body, "name=\"batch\" min=\"1\"") &&
                 strstr(strstr(r.body, "name=\"batch\""), "placeholder=\"8\"") && strstr(r.body, "<option value=\"\">overlap (default)</option>");
    resp_free(&r);
    r = request("GET", "/labs/pp", NULL, NULL);
    const char *layers = r.body ? strstr(r.body, "name=\"layers\"") : NULL;
    int pp_ok = r.status == 200 && strstr(r.body, "<option value=\"\">1f1b (default)</option>") && layers &&
                strstr(layers, "placeholder=\"auto\"") && !strstr(r.body, "name=\"accum\"");
    resp_free(&r);
    EXPECT(ddp_ok && pp_ok, "the forms show the defaults: ddp's --batch 8 and --sync overlap, pp's --schedule 1f1b and --layers "
           "auto; pp's form has no --accum (ddp %d, pp %d)", ddp_ok, pp_ok);
}

static void check_ref(const char *done_id, const char *running_id, const char *own) {
    Resp r = request("GET", "/labs/ddp", NULL, NULL);
    int offered = r.status == 200 && strstr(r.body, "<select id=\"f-ref\" name=\"ref\" data-runs>");
    resp_free(&r);
    r = request("GET", "/labs/collectives", NULL, NULL);
    offered &= r.status == 200 && !strstr(r.body, "name=\"ref\"");
    resp_free(&r);
    EXPECT(offered, "the training labs' forms offer --ref, the collectives lab's does not");

    char bad[5][400];
    snprintf(bad[0], sizeof bad[0], "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"ref\":\"no-such-run\"}}");
    snprintf(bad[1], sizeof bad[1], "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"ref\":\"../%s\"}}", done_id);
    snprintf(bad[2], sizeof bad[2], "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"ref\":\"%s\"}}", running_id);
    snprintf(bad[3], sizeof bad[3], "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"ref\":42}}");
    snprintf(bad[4], sizeof bad[4], "{\"lab\":\"collectives\",\"n\":2,\"steps\":3,\"options\":{\"ref\":\"%s\"}}", done_id);
    int before = runs_count(), ok400 = 0;
    for (int i = 0; i < 5; i++) {
        r = request("POST", "/api/runs", own, bad[i]);
        if (r.status == 400 && strstr(r.body, "ref")) ok400++;
        else printf("# %s: %d %s\n", bad[i], r.status, r.body ? r.body : "");
        if (i == 2) EXPECT(r.status == 400 && strstr(r.body, "has not ended"), "--ref naming a run still going: 400, \"has not ended\"");
        resp_free(&r);
    }
    EXPECT(ok400 == 5 && runs_count() == before, "--ref that is no run, a path out, a run still going, a number, or on the "
           "collectives lab: 400 naming ref, nothing started (%d of 5)", ok400);

    char body[400], id[256] = "";
    snprintf(body, sizeof body, "{\"lab\":\"ddp\",\"n\":2,\"steps\":3,\"options\":{\"ref\":\"%s\"}}", done_id);
    r = request("POST", "/api/runs", own, body);
    const char *at = r.body ? strstr(r.body, "\"id\":\"") : NULL;
    if (at) sscanf(at + 6, "%255[^\"]", id);
    EXPECT(r.status == 201 && id[0], "--ref naming a finished run: 201 (%d %s)", r.status, r.body ? r.body : "");
    resp_free(&r);
    if (!id[0]) return;
    free(stream(id, 0, -1, 120));  // (to its end)
    char path[400], want_ref[300];
    snprintf(path, sizeof path, "/api/runs/%s", id);
    // (the description's "ref" field: its value, then the next field or the end)
    snprintf(want_ref, sizeof want_ref, "\"ref\":\"%s\"", done_id);
    r = request("GET", path, NULL, NULL);
    char err[128];
    JsonValue *info = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    const JsonValue *cfg_ref = json_get(json_get(json_get(info, "meta"), "config"), "ref");
    const char *dir_ref = cfg_ref && cfg_ref->type == JSON_STRING ? cfg_ref->string : "";
    size_t dl = strlen(dir_ref), il = strlen(done_id);
    const char *ref_at = r.body ? strstr(r.body, want_ref) : NULL;
    int ref_named = ref_at && (ref_at[strlen(want_ref)] == '}' || ref_at[strlen(want_ref)] == ',');
    EXPECT(r.status == 200 && strstr(r.body, "\"status\":\"ok\"") && ref_named && dir_ref[0] == '/' &&
           dl > il && dir_ref[dl - il - 1] == '/' && strcmp(dir_ref + dl - il, done_id) == 0,
           "the run compared with it ends ok; its description names the reference (\"ref\"), its config the "
           "reference's directory (%s): %s", dir_ref, r.body ? r.body : "");
    json_free(info);
    resp_free(&r);
}

static void check_run(void) {
    char own[300];
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", token, port);
    time_t before = time(NULL);
    Resp r = request("POST", "/api/runs", own, "{\"lab\":\"pp\",\"n\":2,\"steps\":6,\"options\":{\"schedule\":\"1f1b\",\"micro\":4}}");
    time_t after = time(NULL);
    char id[256] = "";
    const char *at = r.body ? strstr(r.body, "\"id\":\"") : NULL;
    if (at) sscanf(at + 6, "%255[^\"]", id);
    EXPECT(r.status == 201 && id[0], "POST /api/runs with the token from our own page: 201 and the run's id (%d %s)", r.status,
           r.body ? r.body : "");
    resp_free(&r);
    if (!id[0]) return;
    // Named as the launcher names runs (runlog_new_dir): pp-<YYYYmmdd-HHMMSS in UTC>-<4 hex>.
    int named = 0;
    for (time_t t = before; t <= after && !named; t++) {
        struct tm tm;
        gmtime_r(&t, &tm);
        char want[64];
        strftime(want, sizeof want, "pp-%Y%m%d-%H%M%S-", &tm);
        named = strncmp(id, want, strlen(want)) == 0 && strlen(id) == strlen(want) + 4 &&
                strspn(id + strlen(want), "0123456789abcdef") == 4;
    }
    EXPECT(named, "a run started from the web is named as the launcher names runs, pp-<UTC time>-<4 hex> (%s)", id);

    // Live: the stream from the start, while the ranks write.
    char *live = stream(id, 0, -1, 120);
    char dir[900];
    snprintf(dir, sizeof dir, "%s/%s", runs_dir, id);
    char **rank0 = NULL;
    int total = log_lines(dir, 2, &rank0);
    int events = 0, in_order = 1, ids_ok = 1, r0 = 0;
    long expect_id = 0;
    for (char *p = live; (p = strstr(p, "\nid: ")); p++) {
        long got = strtol(p + 5, NULL, 10);
        ids_ok &= got == expect_id++;
        char *data = strstr(p, "\ndata: ");
        if (!data) break;
        char *nl = strchr(data + 7, '\n');
        events++;
        if (strncmp(data + 7, "{\"ev\":", 6) == 0 && strstr(data, "\"rank\":0,") && strstr(data, "\"rank\":0,") < nl) {
            in_order &= rank0 && rank0[r0] && strncmp(data + 7, rank0[r0], (size_t)(nl - data - 7)) == 0;
            r0++;
        }
    }
    EXPECT(events == total && total > 0 && ids_ok && in_order && strstr(live, "event: end"),
           "SSE on a live run: every event (%d of %d in the logs), ids 0,1,2,..., rank 0's in its log's order, then "
           "'end'", events, total);
    free(live);
    for (int i = 0; rank0 && rank0[i]; i++) free(rank0[i]);
    free(rank0);

    // Resumed: after Last-Event-ID k, the stream starts at k + 1.
    char *resumed = stream(id, 0, 9, 20);
    EXPECT(strncmp(strstr(resumed, "id: ") ? strstr(resumed, "id: ") : "", "id: 10\n", 7) == 0,
           "SSE resumes after Last-Event-ID 9 at id 10");
    free(resumed);
    char path[400];
    snprintf(path, sizeof path, "/api/runs/%s/events?from=5&kind=step&rank=0", id);
    r = request("GET", path, NULL, NULL);
    int steps = 0;
    for (char *p = r.body; p && (p = strstr(p, "{\"ev\":\"step\",\"rank\":0")); p++) steps++;
    EXPECT(r.status == 200 && steps == 6 && strstr(r.body, "\"done\":true"),
           "GET events?from=5&kind=step&rank=0: rank 0's 6 step events, and done (%d)", steps);
    resp_free(&r);
    snprintf(path, sizeof path, "/api/runs/%s", id);
    r = request("GET", path, NULL, NULL);
    EXPECT(r.status == 200 && strstr(r.body, "\"status\":\"ok\"") && strstr(r.body, "\"summary\":{"),
           "GET /api/runs/<id>: status ok, with the summary");
    resp_free(&r);
    check_grade(id);

    // 50 clients on one live run, joining at different moments: each gets every event, in order.
    char many_id[256] = "";
    r = request("POST", "/api/runs", own, "{\"lab\":\"ddp\",\"n\":2,\"steps\":40}");
    at = r.body ? strstr(r.body, "\"id\":\"") : NULL;
    if (at) sscanf(at + 6, "%255[^\"]", many_id);
    resp_free(&r);
    enum { CLIENTS = 50 };
    pid_t kids[CLIENTS];
    for (int i = 0; i < CLIENTS && many_id[0]; i++) {
        fflush(stdout);
        kids[i] = fork();
        if (kids[i] == 0) {
            usleep((useconds_t)(i % 10) * 30000);  // some join late: they catch up from index 0
            char *text = stream(many_id, 0, -1, 120);
            long count = 0, expect = 0;
            int ordered = 1;
            for (char *p = text; (p = strstr(p, "\nid: ")); p++, count++) ordered &= strtol(p + 5, NULL, 10) == expect++;
            char out_path[900];
            snprintf(out_path, sizeof out_path, "%s/client-%d", tmp, i);
            FILE *f = fopen(out_path, "w");
            if (f) fprintf(f, "%ld %d %d\n", count, ordered, strstr(text, "event: end") != NULL), fclose(f);
            _exit(0);
        }
    }
    for (int i = 0; i < CLIENTS && many_id[0]; i++) waitpid(kids[i], NULL, 0);
    char many_dir[900];
    snprintf(many_dir, sizeof many_dir, "%s/%s", runs_dir, many_id);
    int want = log_lines(many_dir, 2, NULL), complete = 0;
    for (int i = 0; i < CLIENTS && many_id[0]; i++) {
        char in_path[900];
        snprintf(in_path, sizeof in_path, "%s/client-%d", tmp, i);
        char *t = read_file(in_path, NULL);
        long count = 0;
        int ordered = 0, ended = 0;
        if (t) sscanf(t, "%ld %d %d", &count, &ordered, &ended);
        complete += count == want && ordered && ended;
        free(t);
    }
    EXPECT(complete == CLIENTS && want > 0, "50 SSE clients on one live run, joining at different moments: each got all %d "
           "events in order and the end (%d of 50)", want, complete);

    // Threads: a stream on a run that goes on holds a thread until its client leaves. More
    // streams than the server has threads, each dropped after its first bytes: if a thread
    // stayed behind per client, the server would stop answering.
    char long_id[256] = "";
    r = request("POST", "/api/runs", own, "{\"lab\":\"ddp\",\"n\":2,\"steps\":100000}");
    at = r.body ? strstr(r.body, "\"id\":\"") : NULL;
    if (at) sscanf(at + 6, "%255[^\"]", long_id);
    resp_free(&r);
    check_ref(id, long_id, own);
    // Grading waits for the end: a run still going is refused with a reason, not graded.
    r = post_grade(long_id, own);
    EXPECT(r.status == 409 && strstr(r.body, "still going"), "POST grade on a run still going: 409 with a reason (%d %s)",
           r.status, r.body ? r.body : "");
    resp_free(&r);
    int opened = 0;
    for (int i = 0; i < 150 && long_id[0]; i++) {
        int fd = connect_server();
        if (fd < 0) continue;
        char req[512];
        int n = snprintf(req, sizeof req, "GET /api/runs/%s/stream?from=0 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", long_id, port);
        char first[64];
        if (write(fd, req, (size_t)n) == n && read(fd, first, sizeof first) > 0) opened++;
        close(fd);
    }
    usleep(500000);
    EXPECT(opened == 150 && get_status("/") == 200, "150 streams opened and dropped (the server has 64 threads): it "
           "still answers (%d opened)", opened);

    // Stopping with a stream open: SIGTERM, and the server is gone within 3 s.
    int fd = connect_server();
    char req[512];
    int n = snprintf(req, sizeof req, "GET /api/runs/%s/stream?from=0 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", long_id, port);
    if (fd >= 0 && write(fd, req, (size_t)n) != n) printf("# write failed\n");
    usleep(300000);
    kill(server, SIGTERM);
    int gone = 0, status = -1;
    for (double t0 = now_s(); !gone && now_s() - t0 < 3; usleep(20000))
        if (waitpid(server, &status, WNOHANG) == server) gone = 1;
    EXPECT(gone && WIFEXITED(status) && WEXITSTATUS(status) == 0, "SIGTERM with a stream open: the server exits 0 within 3 s");
    if (!gone) kill(server, SIGKILL), waitpid(server, NULL, 0);
    server = 0;
    if (fd >= 0) close(fd);
    // The long run goes on without the server: stop it (its launcher runs in its own session).
    char runs_pids[900];
    snprintf(runs_pids, sizeof runs_pids, "%s/%s", runs_dir, long_id);
    pid_t pids[16];
    for (int round = 0; round < 20 && run_procs(runs_pids, -1, pids, 16) > 0; round++) {
        int k = run_procs(runs_pids, -1, pids, 16);
        for (int i = 0; i < k && i < 16; i++) kill(pids[i], SIGTERM);
        usleep(100000);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "pkill -TERM -f -- '--run-dir %s' 2>/dev/null", runs_pids);
    if (system(cmd) < 0) printf("# pkill failed\n");
}

// ---------------------------------------------------------------------------------------
// 14. Runs at once, and a run that fails at start

// Lab programs that stand in for the real ones (SHARDLAB_LABS), for single and ddp: each rank
// sleeps `secs` seconds and logs nothing (a run that holds its slot and takes no memory), or,
// with secs < 0, fails at start as a rank on a full disk does (/dev/full: every write refused).
static void fake_labs(char *dir, size_t n, const char *name, int secs) {
    snprintf(dir, n, "%s/%s", tmp, name);
    mkdir(dir, 0755);
    const char *labs[] = {"single", "ddp"};
    for (int i = 0; i < 2; i++) {
        char path[900], text[300];
        snprintf(path, sizeof path, "%s/%s", dir, labs[i]);
        if (secs >= 0) snprintf(text, sizeof text, "#!/bin/sh\nexec sleep %d\n", secs);
        else snprintf(text, sizeof text, "#!/bin/sh\necho step > /dev/full 2>/dev/null || "
                                         "{ echo 'cannot write its log: No space left on device' >&2; exit 1; }\n");
        write_text(path, "w", text);
        chmod(path, 0755);
    }
}

// Stops the run in runs/id that a server started (its launcher passes SIGTERM on to the ranks),
// once its launcher runs: a server's child is the server until it has exec'd the launcher, so
// it is looked for up to wait_s seconds.
static void stop_run(const char *runs, const char *id, double wait_s) {
    char dir[1000];
    snprintf(dir, sizeof dir, "%s/%s", runs, id);
    pid_t launcher = 0;
    for (double t0 = now_s(); id[0] && !(launcher = launcher_of(dir)) && now_s() - t0 < wait_s;) usleep(50000);
    if (launcher) kill(launcher, SIGTERM);
    for (double t0 = now_s(); launcher && kill(launcher, 0) == 0 && now_s() - t0 < 10;) usleep(50000);
    pid_t pids[16];
    for (int round = 0; round < 20 && run_procs(dir, -1, pids, 16) > 0; round++) {
        int k = run_procs(dir, -1, pids, 16);
        for (int i = 0; i < k && i < 16; i++) kill(pids[i], SIGKILL);
        usleep(100000);
    }
}

// Every run in runs stopped, however many a broken variant started (twelve at once, say).
static void stop_all(const char *runs) {
    DIR *d = opendir(runs);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') stop_run(runs, e->d_name, 0);
    if (d) closedir(d);
}

// The run's status as GET /api/runs/<id> says it, once it is not "running" (or after max_s).
static void status_after(const char *id, double max_s, char *out, size_t n) {
    char path[400];
    snprintf(path, sizeof path, "/api/runs/%s", id);
    snprintf(out, n, "?");
    for (double t0 = now_s(); now_s() - t0 < max_s; usleep(100000)) {
        Resp r = request("GET", path, NULL, NULL);
        const char *st = r.body ? strstr(r.body, "\"status\":\"") : NULL;
        if (st) snprintf(out, n, "%.*s", (int)strcspn(st + 10, "\""), st + 10);
        resp_free(&r);
        if (strcmp(out, "running") != 0 && strcmp(out, "?") != 0) return;
    }
}

// POST /api/runs of body with the token tok: the reply (status), the new run's id or the
// run a 429 names in id, and whether a 429 came with a Retry-After.
static Resp post_run(const char *tok, const char *body, char *id, size_t n) {
    char hdr[200];
    snprintf(hdr, sizeof hdr, "X-Shardlab-Token: %s\r\n", tok);
    Resp r = request("POST", "/api/runs", hdr, body);
    const char *at = r.body ? strstr(r.body, r.status == 429 ? "\"run\":\"" : "\"id\":\"") : NULL;
    id[0] = 0;
    if (at) snprintf(id, n, "%.*s", (int)strcspn(at + (r.status == 429 ? 7 : 6), "\""), at + (r.status == 429 ? 7 : 6));
    return r;
}

static int count_dirs(const char *dir) {
    int k = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) k += e->d_name[0] != '.';
    if (d) closedir(d);
    return k;
}

// The web starts at most --max-runs labs at once (default 1): twelve POSTs at once, as a
// script or an impatient student sends them, start one run, and the eleven others are 429
// with the house's JSON error, the run that holds the slot and a Retry-After. The slot is
// free again once that run has ended. Broken variants: no limit (twelve 201s, twelve
// launchers); the limit checked without start_lock (two or more 201s when requests race).
static void check_max_runs(void) {
    char labs[700], runs[700], env[800], tok[64];
    fake_labs(labs, sizeof labs, "sleepy-labs", 60);
    snprintf(runs, sizeof runs, "%s/runs-bounded", tmp);
    mkdir(runs, 0755);
    snprintf(env, sizeof env, "SHARDLAB_LABS=%s", labs);
    char *argv[] = {(char *)shardlab, "web", "--port", "0", NULL};
    int p, main_port = port;
    pid_t srv = start_argv("bounded", argv, runs, env, &p, tok);
    if (!EXPECT(srv && p, "a server with the stand-in labs starts")) return;
    port = p;
    enum { AT_ONCE = 12 };
    pid_t kids[AT_ONCE];
    for (int i = 0; i < AT_ONCE; i++) {
        fflush(stdout);
        if ((kids[i] = fork()) == 0) {
            char id[256], retry[32], path[900];
            Resp r = post_run(tok, "{\"lab\":\"ddp\",\"n\":8,\"steps\":100}", id, sizeof id);
            header_of(&r, "Retry-After", retry, sizeof retry);
            int json = r.body && strncmp(r.body, "{\"error\":\"", 10) == 0;
            snprintf(path, sizeof path, "%s/bounded-%d", tmp, i);
            FILE *f = fopen(path, "w");
            if (f) fprintf(f, "%d %d %s %s\n", r.status, json, retry[0] ? retry : "-", id[0] ? id : "-"), fclose(f);
            _exit(0);
        }
    }
    for (int i = 0; i < AT_ONCE; i++) waitpid(kids[i], NULL, 0);
    int created = 0, busy = 0;
    char started[256] = "", named[AT_ONCE][256];
    for (int i = 0; i < AT_ONCE; i++) {
        char path[900], retry[32] = "", id[256] = "";
        snprintf(path, sizeof path, "%s/bounded-%d", tmp, i);
        char *t = read_file(path, NULL);
        int status = 0, json = 0;
        if (t) sscanf(t, "%d %d %31s %255s", &status, &json, retry, id);
        free(t);
        named[i][0] = 0;
        if (status == 201) created++, snprintf(started, sizeof started, "%s", id);
        if (status == 429 && json && strcmp(retry, "-") != 0) busy++, snprintf(named[i], sizeof named[i], "%s", id);
    }
    int all_name_it = started[0] != 0;
    for (int i = 0; i < AT_ONCE; i++) all_name_it &= !named[i][0] || strcmp(named[i], started) == 0;
    // What the probe saw: twelve 201s and a launcher each. One run is started; the others are
    // told to wait for it, by name, and nothing else is started (one run directory).
    EXPECT(created == 1 && busy == AT_ONCE - 1 && all_name_it && count_dirs(runs) == 1,
           "%d POSTs of an 8-rank ddp at once, --max-runs left at its default: %d started, %d answered 429 with a "
           "JSON error, a Retry-After and the run that holds the slot (%s); %d run directories", AT_ONCE, created, busy,
           started, count_dirs(runs));
    // The run is listed from its start, before its ranks write a log (these never do), as its
    // page is served: the link the 429 gives is one the list shows.
    Resp r = request("GET", "/api/runs", NULL, NULL);
    const char *entry = r.body && started[0] ? strstr(r.body, started) : NULL;
    EXPECT(entry && strstr(entry, "\"status\":\"running\""), "GET /api/runs lists that run, running, before it has a "
           "log (%s)", one_line(r.body ? r.body : ""));
    resp_free(&r);
    char id[256];
    r = post_run(tok, "{\"lab\":\"single\",\"n\":1,\"steps\":1}", id, sizeof id);
    // The reason names the limit, the run and what to do.
    EXPECT(r.status == 429 && strstr(r.body, "one lab at a time") && strstr(r.body, started) &&
               strstr(r.body, "--max-runs 2") && strstr(r.all, "429 Too Many Requests"),
           "one more while it runs: 429 Too Many Requests saying one lab at a time, the run, and --max-runs (%d %s)",
           r.status, r.body ? r.body : "");
    resp_free(&r);
    stop_run(runs, started, 10);
    char status[32];
    status_after(started, 5, status, sizeof status);
    r = post_run(tok, "{\"lab\":\"single\",\"n\":1,\"steps\":1}", id, sizeof id);
    // Its run over (the launcher logs a rank stopped by a signal as an error), the slot is
    // free: the next start is 201.
    EXPECT(strcmp(status, "running") != 0 && r.status == 201 && id[0], "once that run is stopped (%s), the next start is 201 "
           "(%d %s)", status, r.status, r.body ? r.body : "");
    resp_free(&r);
    stop_run(runs, id, 10);
    stop_all(runs);
    port = main_port;
    stop_extra(srv);
    char *err = captured("bounded", "err");
    EXPECT(!strstr(err, "ERROR: AddressSanitizer") && !strstr(err, "runtime error"), "that server ran clean under "
           "ASan/UBSan: %s", one_line(err));
    free(err);
    // --help says the limit; a limit out of range is one line and exit 2.
    char *help[] = {(char *)shardlab, "web", "--help", NULL}, *zero[] = {(char *)shardlab, "web", "--max-runs", "0", NULL};
    int help_rc = run(help, "web-help"), zero_rc = run(zero, "web-zero");
    char *help_out = captured("web-help", "out"), *zero_err = captured("web-zero", "err");
    EXPECT(help_rc == 0 && strstr(help_out, "--max-runs N") && strstr(help_out, "default 1") && zero_rc == 2 &&
               strstr(zero_err, "--max-runs must be 1 to 32 (got '0')"),
           "shardlab web --help says --max-runs and its default; --max-runs 0 is exit 2 with one line (%d: %s)", zero_rc,
           one_line(zero_err));
    free(help_out);
    free(zero_err);
}

// The memory pre-flight adds up the runs going on: two runs that each fit alone in what is
// free, and not together, start one after the other. The first holds its slot without taking
// memory (a stand-in lab that sleeps), so what refuses the second is the first's plan (the
// planner's figure: memfit_need_options, per rank x ranks), not memory it took. Broken variant
// (each run compared alone with MemAvailable, as before): the second is 201 too.
static void check_memory_together(void) {
    double avail = memfit_host_available();
    char dim[16] = "", layers[16] = "";
    MemNeed need = {0};
    for (int l = 8; l <= 256 && !dim[0]; l *= 4)
        for (int d = 64; d <= 16384 && !dim[0]; d += 64) {
            snprintf(dim, sizeof dim, "%d", d);
            snprintf(layers, sizeof layers, "%d", l);
            char *opts[] = {"--dim", dim, "--layers", layers};
            need = memfit_need_options("single", 1, 4, opts);
            if (need.rank < 0.6 * avail) dim[0] = 0;
        }
    if (!EXPECT(avail > 0 && dim[0], "a model of single that needs 60%% of the memory free (%.1f GiB): --dim %s --layers %s",
                avail / (1 << 30), dim, layers))
        return;
    char labs[700], runs[700], env[800], tok[64], body[300];
    fake_labs(labs, sizeof labs, "sleepy-labs-mem", 60);
    snprintf(runs, sizeof runs, "%s/runs-memory", tmp);
    mkdir(runs, 0755);
    snprintf(env, sizeof env, "SHARDLAB_LABS=%s", labs);
    char *argv[] = {(char *)shardlab, "web", "--port", "0", "--max-runs", "2", NULL};
    int p, main_port = port;
    pid_t srv = start_argv("memory", argv, runs, env, &p, tok);
    if (!EXPECT(srv && p, "a server with the stand-in labs and --max-runs 2 starts")) return;
    port = p;
    snprintf(body, sizeof body, "{\"lab\":\"single\",\"n\":1,\"steps\":1,\"options\":{\"dim\":%s,\"layers\":%s}}", dim, layers);
    char first[256], named[256], second[256];
    Resp r = post_run(tok, body, first, sizeof first);
    int first_ok = r.status == 201 && first[0];
    resp_free(&r);
    r = post_run(tok, body, named, sizeof named);
    // The second would fit alone (60% of what is free), not beside the first's plan: 429, the
    // figures and where they come from (the run going on), and the run to wait for.
    EXPECT(first_ok && r.status == 429 && !strcmp(named, first) && strstr(r.body, "planned for the 1 run this server is "
           "running") && strstr(r.body, "or start it when"),
           "two runs that each need 60%% of the free memory, --max-runs 2: the first starts, the second is 429 naming "
           "the memory the first will hold and the run (%d %s)", r.status, r.body ? r.body : "");
    resp_free(&r);
    stop_run(runs, first, 10);
    char status[32];
    status_after(first, 5, status, sizeof status);
    r = post_run(tok, body, second, sizeof second);
    // With the first run stopped, its memory is free again.
    EXPECT(r.status == 201 && second[0], "once the first has stopped (%s), the second starts (%d %s)", status, r.status,
           r.body ? r.body : "");
    resp_free(&r);
    stop_run(runs, second, 10);
    stop_all(runs);
    port = main_port;
    stop_extra(srv);
}

// A run started from the web whose ranks fail at start because its disk is full: it ends
// with the status error (never "running", nor "stopped" as if someone had stopped it) in the
// list, its description and its events, and its description holds the launcher's own words,
// since no rank could write a log. The disk is really full: a 64 KiB tmpfs filled up, mounted
// in a mount namespace of the server's own (unshare -m; -rm without root). Where that is not
// allowed, ranks that fail to write as on a full disk stand in. Broken variants: the launcher's
// output sent to /dev/null (no "launcher"); its failure taken as "stopped".
static void check_failed_start(void) {
    char full[700], script[3000], tok[64];
    snprintf(full, sizeof full, "%s/full-disk", tmp);
    mkdir(full, 0755);
    snprintf(script, sizeof script,
             "mount -t tmpfs -o size=64k shardlab-full '%s' && mkdir '%s/runs' && "
             "{ dd if=/dev/zero of='%s/fill' bs=4k 2>/dev/null; true; } && exec '%s' web --port 0 --runs '%s/runs'",
             full, full, full, shardlab, full);
    char *argv[] = {"/usr/bin/unshare", geteuid() == 0 ? "-m" : "-rm", "sh", "-c", script, NULL};
    int p = 0, main_port = port, real = access(argv[0], X_OK) == 0;
    pid_t srv = real ? start_argv("fulldisk", argv, full, NULL, &p, tok) : 0;
    if (!srv || !p) {
        char labs[700], env[800];
        printf("# a full disk needs unshare -m (or -rm): ranks that fail to write stand in\n");
        real = 0;
        fake_labs(labs, sizeof labs, "failing-labs", -1);
        snprintf(env, sizeof env, "SHARDLAB_LABS=%s", labs);
        char *plain[] = {(char *)shardlab, "web", "--port", "0", NULL};
        srv = start_argv("fulldisk", plain, full, env, &p, tok);
    }
    if (!EXPECT(srv && p, "a server whose runs folder is on a full disk starts")) return;
    port = p;
    char id[256], status[32] = "", path[400];
    Resp r = post_run(tok, "{\"lab\":\"ddp\",\"n\":2,\"steps\":5}", id, sizeof id);
    int started = r.status == 201 && id[0];
    resp_free(&r);
    status_after(id, 20, status, sizeof status);
    snprintf(path, sizeof path, "/api/runs/%s", id);
    r = request("GET", path, NULL, NULL);
    char err[128];
    JsonValue *info = r.status == 200 ? json_parse(r.body, strlen(r.body), err, sizeof err) : NULL;
    const JsonValue *said = json_get(json_get(info, "launcher"), "said"), *code = json_get(json_get(info, "launcher"), "exit");
    const char *words = said && said->type == JSON_STRING ? said->string : "";
    int exit1 = code && code->type == JSON_NUMBER && code->number == 1;
    EXPECT(started && !strcmp(status, "error") && exit1 &&
               strstr(words, real ? "No space left on device" : "shardlab: rank") && strstr(words, "shardlab:"),
           "a run whose ranks fail at start (%s): 201, then status error with the launcher's exit status 1 and its "
           "words (%s; said: %s)", real ? "its disk full" : "stand-in ranks", status, one_line(words));
    json_free(info);
    resp_free(&r);
    snprintf(path, sizeof path, "/api/runs/%s/events?from=0", id);
    r = request("GET", path, NULL, NULL);
    int events_error = r.status == 200 && strstr(r.body, "\"done\":true") && strstr(r.body, "\"status\":\"error\"");
    resp_free(&r);
    r = request("GET", "/api/runs", NULL, NULL);
    const char *entry = r.body && id[0] ? strstr(r.body, id) : NULL;
    int listed_error = entry && strstr(entry, "\"status\":\"error\"");
    resp_free(&r);
    // Every reader says the same word.
    EXPECT(events_error && listed_error, "its events are done with status error, and the list says error (%d %d)",
           events_error, listed_error);
    port = main_port;
    stop_extra(srv);
    char *serr = captured("fulldisk", "err");
    EXPECT(!strstr(serr, "ERROR: AddressSanitizer") && !strstr(serr, "runtime error"), "that server ran clean under "
           "ASan/UBSan: %s", one_line(serr));
    free(serr);
}

// ---------------------------------------------------------------------------------------
// 12. A copy's TODO regions on the lab pages (shardlab web --checks DIR, what make web passes)

// make check's programs for src (a copy of labs/) built into bdir, as make check builds them
// (CPU, LABS_SRC), after copying `from` there (objects of the same sources: only what differs
// compiles). 0, or the shell's status; make's output in tmp/<tag>.build.
static int build_checks(const char *src, const char *bdir, const char *from, const char *tag) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && { %s; } && cd '%s' && make -s -j2 BUILD='%s' LABS_SRC='%s' CUDA=0 "
             "todo-programs >'%s/%s.build' 2>&1", bdir, from, root, bdir, src, tmp, tag);
    fflush(stdout);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// The ddp page's regions, in the order of the lessons: DDP's own, and the ring's and AdamW's,
// which every DDP step runs.
static const char *const DDP_REGIONS[] = {"adamw", "ring-reduce-scatter", "ring-all-gather", "ddp-buckets", "ddp-overlap"};
#define DDP_NREGIONS (int)(sizeof DDP_REGIONS / sizeof DDP_REGIONS[0])

// How many of a reply's regions are the ddp page's, in order, each with status `want`; what
// each said goes into said ("name=status ...").
static int regions_with(const Resp *r, const char *want, char *said, size_t n) {
    char err[128];
    said[0] = 0;
    JsonValue *v = r->body ? json_parse(r->body, r->n, err, sizeof err) : NULL;
    if (!v) return snprintf(said, n, "not JSON: %s", r->body ? err : "no body"), 0;
    const JsonValue *regions = json_get(v, "regions");
    int good = 0, count = regions && regions->type == JSON_ARRAY ? (int)regions->count : -1;
    for (int i = 0; i < count; i++) {
        const JsonValue *name = json_get(json_at(regions, (size_t)i), "name"),
                        *st = json_get(json_at(regions, (size_t)i), "status");
        int named = name && name->type == JSON_STRING, has = st && st->type == JSON_STRING;
        size_t used = strlen(said);
        snprintf(said + used, n - used, "%s=%s ", named ? name->string : "?", has ? st->string : "?");
        good += count == DDP_NREGIONS && named && has && !strcmp(name->string, DDP_REGIONS[i]) && !strcmp(st->string, want);
    }
    json_free(v);
    return good;
}

static void check_todo_regions(void) {
    double t0 = now_s();
    // The check programs of labs/ as it is (the reference) and of a starter copy of it (make
    // starter): the reference's from this build's objects, the starter's from the reference's.
    char build[1024], ref_src[700], ref_build[700], st_src[700], st_build[700], from[8192];
    snprintf(build, sizeof build, "%s", shardlab);
    *strrchr(build, '/') = 0;  // .../san
    *strrchr(build, '/') = 0;  // the build this shardlab is of
    snprintf(ref_src, sizeof ref_src, "%s/todo-ref/labs", tmp);
    snprintf(ref_build, sizeof ref_build, "%s/todo-build-ref", tmp);
    snprintf(st_src, sizeof st_src, "%s/todo-starter/labs", tmp);
    snprintf(st_build, sizeof st_build, "%s/todo-build-starter", tmp);
    snprintf(from, sizeof from, "mkdir -p '%s/todo-ref' && cp -rp '%s/labs' '%s/todo-ref/' && for d in common algo; do "
             "[ ! -d '%s'/$d ] || cp -rp '%s'/$d '%s/'; done", tmp, root, tmp, build, build, ref_build);
    int rc = build_checks(ref_src, ref_build, from, "todo-ref");
    snprintf(from, sizeof from, "sh '%s/labs/command/grade/starter.sh' '%s/todo-starter' >/dev/null && cp -rp '%s/.' '%s/'", root,
             tmp, ref_build, st_build);
    rc = rc ? rc : build_checks(st_src, st_build, from, "todo-starter");
    char *log = captured("todo-starter", "build");
    if (!EXPECT(rc == 0, "make check's programs build for labs/ and for a starter copy of it (exit %d: %s)", rc, one_line(log))) {
        free(log);
        return;
    }
    free(log);
    printf("# the check programs of the reference and the starter: %.1f s\n", now_s() - t0);

    char checks[800], tok[64], own[300], said[1000];
    int main_port = port, st_port, ref_port;
    snprintf(checks, sizeof checks, "%s/todo", st_build);
    char *st_opts[] = {"--port", "0", "--checks", checks, NULL};
    pid_t st_server = start_extra("todo-starter-web", st_opts, runs_dir, &st_port, tok);
    if (!EXPECT(st_port > 0, "shardlab web --checks DIR (make check's programs of a starter copy) starts")) return;
    port = st_port;
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", tok, port);

    // Proves: the lab page lists the lab's regions (DDP's, the ring's, AdamW's), each with its
    // file and points, under "Your TODO regions", with the "Check them" button and its script.
    Resp page = request("GET", "/labs/ddp", NULL, NULL);
    int listed = 0;
    for (int i = 0; i < DDP_NREGIONS; i++) {
        char row[200];
        snprintf(row, sizeof row, "<tr data-region=\"%s\">", DDP_REGIONS[i]);
        listed += page.body && strstr(page.body, row) != NULL;
    }
    EXPECT(page.status == 200 && page.body && strstr(page.body, "<h2>Your TODO regions</h2>") && listed == DDP_NREGIONS &&
               strstr(page.body, "<code>labs/05-ddp/ddp.c</code>") && strstr(page.body, ">Check them</button>") &&
               strstr(page.body, "action=\"/api/checks?lab=ddp\"") && strstr(page.body, "src=\"/static/checks.js\"") &&
               !strstr(page.body, "data-region=\"zero-shard-length\""),
           "with --checks, /labs/ddp shows \"Your TODO regions\": the %d regions a DDP step runs (%d listed), none "
           "other, and \"Check them\"", DDP_NREGIONS, listed);
    resp_free(&page);

    // Proves: checking runs the student's code, so it needs the token and this site (403), and
    // a POST (405); a lab the catalog does not have is 404, none at all 400.
    char foreign[300];
    snprintf(foreign, sizeof foreign, "X-Shardlab-Token: %s\r\nOrigin: http://evil.example\r\n", tok);
    Resp none = request("POST", "/api/checks?lab=ddp", NULL, ""), evil = request("POST", "/api/checks?lab=ddp", foreign, ""),
         get = request("GET", "/api/checks?lab=ddp", NULL, NULL), bad = request("POST", "/api/checks?lab=no-such-lab", own, ""),
         dots = request("POST", "/api/checks?lab=..%2fddp", own, ""), nolab = request("POST", "/api/checks", own, "");
    EXPECT(none.status == 403 && evil.status == 403 && get.status == 405 && bad.status == 404 && dots.status == 404 &&
               nolab.status == 400 && strstr(bad.body, "no lab called"),
           "POST /api/checks without the token, or from another site: 403 (%d, %d); GET: 405 (%d); a lab not in the "
           "catalog: 404 (%d, %d); no lab: 400 (%d)", none.status, evil.status, get.status, bad.status, dots.status,
           nolab.status);
    resp_free(&none), resp_free(&evil), resp_free(&get), resp_free(&bad), resp_free(&dots), resp_free(&nolab);

    // Proves: the check runs the starter's regions: every one not written yet, where the stub is.
    Resp st = request("POST", "/api/checks?lab=ddp", own, "");
    int good = regions_with(&st, "not written yet", said, sizeof said);
    EXPECT(st.status == 200 && good == DDP_NREGIONS && strstr(st.body, "\"message\":\"not written yet: ") &&
               strstr(st.body, "(labs/05-ddp/ddp.c:") && strstr(st.body, "\"next_region\":\"adamw\""),
           "POST /api/checks?lab=ddp on a starter copy: 200, JSON, all %d regions 'not written yet' with where, next "
           "adamw (%d, %d: %s)", DDP_NREGIONS, st.status, good, said);
    resp_free(&st);
    port = main_port;
    stop_extra(st_server);

    // Proves: on labs/ as it is, every region of the lab passes.
    snprintf(checks, sizeof checks, "%s/todo", ref_build);
    char *ref_opts[] = {"--port", "0", "--checks", checks, NULL};
    pid_t ref_server = start_extra("todo-ref-web", ref_opts, runs_dir, &ref_port, tok);
    port = ref_port;
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", tok, port);
    Resp ref = request("POST", "/api/checks?lab=ddp", own, "");
    good = regions_with(&ref, "passed", said, sizeof said);
    EXPECT(ref_port && ref.status == 200 && good == DDP_NREGIONS && strstr(ref.body, "\"passed\":5,\"failed\":0"),
           "POST /api/checks?lab=ddp on labs/ as it is: all %d regions passed (%d, %d: %s)", DDP_NREGIONS, ref.status, good,
           said);
    resp_free(&ref);
    port = main_port;
    stop_extra(ref_server);

    // Proves: without --checks (this test's main server), lab pages show nothing new, and the API says why.
    page = request("GET", "/labs/ddp", NULL, NULL);
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", token, port);
    Resp off = request("POST", "/api/checks?lab=ddp", own, "");
    EXPECT(page.status == 200 && !strstr(page.body, "Your TODO regions") && !strstr(page.body, "checks.js") &&
               off.status == 404 && strstr(off.body, "--checks"),
           "without --checks: /labs/ddp has no TODO regions, POST /api/checks is 404 saying why (%d)", off.status);
    resp_free(&page), resp_free(&off);

    // Proves: the driver is told a deadline for each check program (it ends one that hangs,
    // labs/command/grade/sandbox.h), each region's share of the two minutes: 110 s / 5 regions for
    // ddp. A stand-in driver answers with the arguments it was given.
    char fake[800], fake_driver[900];
    snprintf(fake, sizeof fake, "%s/fake-checks", tmp);
    snprintf(fake_driver, sizeof fake_driver, "%s/check", fake);
    mkdir(fake, 0755);
    write_text(fake_driver, "w", "#!/bin/sh\nprintf '{\"regions\":[],\"argv\":\"%s\"}\\n' \"$*\"\n");
    chmod(fake_driver, 0755);
    char *fake_opts[] = {"--port", "0", "--checks", fake, NULL};
    int fake_port;
    pid_t fake_server = start_extra("todo-fake-web", fake_opts, runs_dir, &fake_port, tok);
    port = fake_port;
    snprintf(own, sizeof own, "X-Shardlab-Token: %s\r\nOrigin: http://127.0.0.1:%d\r\n", tok, port);
    Resp told = request("POST", "/api/checks?lab=ddp", own, "");
    EXPECT(fake_port && told.status == 200 && told.body && strstr(told.body, "--deadline 22 --json adamw"),
           "POST /api/checks?lab=ddp: the driver gets --deadline 22, each of the 5 regions' share of the two minutes "
           "(%d: %s)", told.status, told.body ? one_line(told.body) : "");
    resp_free(&told);
    port = main_port;
    stop_extra(fake_server);

    // Proves: --checks names a directory that holds make check's driver; anything else is one line, exit 2.
    char *missing_opts[] = {"--port", "0", "--checks", "/no/such/dir", NULL}, *empty_opts[] = {"--port", "0", "--checks", tmp, NULL};
    int p1, p2;
    stop_extra(start_extra("todo-missing", missing_opts, runs_dir, &p1, tok));
    stop_extra(start_extra("todo-empty", empty_opts, runs_dir, &p2, tok));
    char *e1 = captured("todo-missing", "err"), *e2 = captured("todo-empty", "err");
    EXPECT(!p1 && !p2 && count_lines(e1) == 1 && strstr(e1, "--checks: '/no/such/dir' is not a directory") &&
               count_lines(e2) == 1 && strstr(e2, "has no check program"),
           "--checks with no such directory, or one without make check's driver: refused in one line (%s | %s)",
           one_line(e1), one_line(e2));
    free(e1), free(e2);
    char *errs[] = {captured("todo-starter-web", "err"), captured("todo-ref-web", "err")};
    EXPECT(!strstr(errs[0], "ERROR: AddressSanitizer") && !strstr(errs[0], "runtime error") &&
               !strstr(errs[1], "ERROR: AddressSanitizer") && !strstr(errs[1], "runtime error"),
           "those servers ran clean under ASan/UBSan: %s%s", one_line(errs[0]), one_line(errs[1]));
    free(errs[0]), free(errs[1]);
    printf("# the TODO regions on the lab pages: %.1f s\n", now_s() - t0);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_web ROOT SHARDLAB\n");
        return 2;
    }
    static char root_abs[4096], shardlab_abs[4096];
    if (!realpath(argv[1], root_abs) || !realpath(argv[2], shardlab_abs)) return fprintf(stderr, "test_web: no such path\n"), 2;
    root = root_abs, shardlab = shardlab_abs;
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-web-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    make_root();
    start_server();
    if (!EXPECT(port > 0 && token[0], "shardlab web --port 0 prints the URL with its port and token")) {
        if (server) kill(server, SIGKILL);
        return test_done();
    }
    check_no_runs();
    check_pages();
    check_lan_host();
    check_ipv6();
    check_fuzz();
    check_hostile_markdown();
    check_safety();
    check_nonfinite_run();
    check_trace();
    check_runs_without_steps();
    check_form_defaults();
    check_todo_regions();
    check_term_options();
    check_summary_before_last_rank();
    check_request_numbers();
    check_run_file_numbers();
    check_option_numbers();
    check_slow_body();
    check_stream_limits();
    check_dead_run();
    check_fifo_run();
    check_twice_headers();
    check_unlisted_names();
    check_failed_start();
    check_max_runs();
    check_memory_together();
    check_run();
    if (server) kill(server, SIGKILL), waitpid(server, NULL, 0);
    char *err = captured("server", "err");
    EXPECT(!strstr(err, "ERROR: AddressSanitizer") && !strstr(err, "runtime error"),
           "the server ran clean under ASan/UBSan: %s", one_line(err));
    free(err);
    tmp_finish(test_failed);
    return test_done();
}
