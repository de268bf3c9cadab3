// web.c — the web server: start and stop, the router, the checks on every request, the pages
// and the static files. See web.h (the routes, the API, and why the checks are what they are).
#include "web.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <md4c-html.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "catalog.h"
#include "check.h"
#include "course.h"
#include "runlog.h"

#define DEBIAN_CHARTJS "/usr/share/javascript/chart.js"

static Web *the_web;  // for the signal handler
static Lexicon lexicon;

// ---------------------------------------------------------------------------------------
// Replies

// Headers and body in one write: two small writes on a kept-alive connection meet Nagle's
// algorithm and the client's delayed ACK, and every reply would wait ~40 ms for nothing.
static void reply(struct mg_connection *c, int status, const char *type, const char *body, size_t n,
                  const char *extra_headers) {
    const char *reason = status == 200 ? "OK" : status == 201 ? "Created" : status == 204 ? "No Content" : status == 302 ? "Found"
                       : status == 400 ? "Bad Request" : status == 403 ? "Forbidden" : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed" : status == 409 ? "Conflict" : status == 411 ? "Length Required" : status == 413 ? "Payload Too Large"
                       : status == 500 ? "Internal Server Error" : status == 503 ? "Service Unavailable" : "Error";
    StrBuf r;
    sb_init(&r);
    sb_printf(&r,
              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nX-Content-Type-Options: nosniff\r\n"
              "Content-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'\r\n"
              "Referrer-Policy: no-referrer\r\nCache-Control: no-store\r\n%s\r\n",
              status, reason, type, n, extra_headers ? extra_headers : "");
    sb_append(&r, body, n);
    mg_write(c, r.data, r.len);
    sb_free(&r);
}

static int reply_json_error(struct mg_connection *c, int status, const char *why) {
    StrBuf b;
    sb_init(&b);
    sb_printf(&b, "{\"error\":");
    sb_json_string(&b, why);
    sb_printf(&b, "}");
    reply(c, status, "application/json", b.data, b.len, NULL);
    sb_free(&b);
    return status;
}

static int not_found(struct mg_connection *c) {
    const char *body = "<!doctype html><meta charset=utf-8><title>Not found</title><p>Not found. <a href=\"/\">Home</a>\n";
    reply(c, 404, "text/html; charset=utf-8", body, strlen(body), NULL);
    return 404;
}

// ---------------------------------------------------------------------------------------
// A connection's socket, and a request that does not come

// CivetWeb (1.15) does not give a handler its connection's socket, and the server needs it:
// to see at once that a stream's client has gone (runs_stream), and to stop waiting for a
// body that does not come. It is found by its two ends: the socket of this process whose
// local port is the one the request came in on and whose peer is the client's address and
// port. A TCP connection is exactly that pair, and CivetWeb keeps it open while a handler
// runs, so the match is the connection itself.
int web_socket(const struct mg_connection *c) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    DIR *d = opendir("/proc/self/fd");
    int found = -1;
    for (struct dirent *e; d && found < 0 && (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        int fd = atoi(e->d_name);
        struct sockaddr_storage peer, local;
        socklen_t pl = sizeof peer, ll = sizeof local;
        if (getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || getsockname(fd, (struct sockaddr *)&local, &ll) != 0)
            continue;
        char addr[INET6_ADDRSTRLEN] = "";
        int pport, lport;
        if (peer.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&peer)->sin_addr, addr, sizeof addr);
            pport = ntohs(((struct sockaddr_in *)&peer)->sin_port), lport = ntohs(((struct sockaddr_in *)&local)->sin_port);
        } else if (peer.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&peer)->sin6_addr, addr, sizeof addr);
            pport = ntohs(((struct sockaddr_in6 *)&peer)->sin6_port), lport = ntohs(((struct sockaddr_in6 *)&local)->sin6_port);
        } else {
            continue;
        }
        if (pport == ri->remote_port && lport == ri->server_port && strcmp(addr, ri->remote_addr) == 0) found = fd;
    }
    if (d) closedir(d);
    return found;
}

// Reads with a deadline. CivetWeb waits up to the request timeout for each piece of a body,
// afresh after every byte that trickles in, so a client that sends fewer bytes than it
// announced, or one a second, would hold a thread for as long as it liked. A handler reading
// a body registers its socket's deadline here; the main loop (web_main) shuts the reading side
// of a socket past its deadline, and the read blocked in CivetWeb returns at once.
#define MAX_DEADLINES (2 * WEB_THREADS)
static struct {
    int fd;
    int64_t until_us;
} deadlines[MAX_DEADLINES];
static pthread_mutex_t deadline_lock = PTHREAD_MUTEX_INITIALIZER;

static int deadline_set(int fd, int64_t until_us) {
    int slot = -1;
    pthread_mutex_lock(&deadline_lock);
    for (int i = 0; i < MAX_DEADLINES && slot < 0; i++)
        if (deadlines[i].until_us == 0) slot = i, deadlines[i].fd = fd, deadlines[i].until_us = until_us;
    pthread_mutex_unlock(&deadline_lock);
    return slot;
}

static void deadline_clear(int slot) {
    if (slot < 0) return;
    pthread_mutex_lock(&deadline_lock);
    deadlines[slot].until_us = 0;
    pthread_mutex_unlock(&deadline_lock);
}

static void deadlines_enforce(void) {
    int64_t now = runlog_now_us();
    pthread_mutex_lock(&deadline_lock);
    for (int i = 0; i < MAX_DEADLINES; i++)
        if (deadlines[i].until_us && now > deadlines[i].until_us) {
            shutdown(deadlines[i].fd, SHUT_RD);
            deadlines[i].until_us = 0;
        }
    pthread_mutex_unlock(&deadline_lock);
}

// Whether this request's body has been read (each request runs on one thread). A body left
// unread (the request refused, too large, cut short) is not waited for: after the reply, the
// reading side of the connection is shut, so CivetWeb closes it instead of reading on.
static _Thread_local int body_read;

static int has_body(struct mg_connection *c) {
    return mg_get_request_info(c)->content_length > 0 || mg_get_header(c, "Transfer-Encoding") != NULL;
}

// The request's body, read within the request timeout: 0 with it in *out (NUL-terminated;
// free() it), or the HTTP status to answer with why.
static int read_body(Web *w, struct mg_connection *c, char **out, long long *n, const char **why) {
    long long len = mg_get_request_info(c)->content_length;
    *out = NULL;
    if (len < 0) return *why = "the body needs a Content-Length", 411;
    if (len > WEB_MAX_BODY) return *why = "the body is over 64 KiB", 413;
    int fd = web_socket(c);
    int slot = fd >= 0 ? deadline_set(fd, runlog_now_us() + (int64_t)w->request_timeout_s * 1000000) : -1;
    char *body = malloc_check((size_t)len + 1);
    long long got = 0;
    for (int k; got < len && (k = mg_read(c, body + got, (size_t)(len - got))) > 0;) got += k;
    deadline_clear(slot);
    body[got] = 0;
    if (got < len) {
        free(body);
        return *why = "the body was cut short: fewer bytes came than Content-Length said, within the request timeout", 400;
    }
    body_read = 1;
    *out = body, *n = got;
    return 0;
}

// ---------------------------------------------------------------------------------------
// The checks

// Host must name this server: a page on another site that got the browser to resolve its own
// name to 127.0.0.1 (DNS rebinding) still sends its own name here.
static int host_ok(Web *w, struct mg_connection *c) {
    const char *host = mg_get_header(c, "Host");
    if (!host) return 0;
    char want[300];
    const char *names[] = {"127.0.0.1", "localhost", "::1", w->host};
    for (int i = 0; i < 4; i++) {  // (an IPv6 address in brackets, as a URL writes it)
        snprintf(want, sizeof want, strchr(names[i], ':') ? "[%s]:%d" : "%s:%d", names[i], w->port);
        if (strcmp(host, want) == 0) return 1;
    }
    // Listening on every interface (--host 0.0.0.0 or ::), the server is also this machine's
    // name and each of its addresses, as a browser on the network names it. A rebinding page
    // still sends its own name, which is none of these.
    if (strcmp(w->host, "0.0.0.0") != 0 && strcmp(w->host, "::") != 0) return 0;
    char name[256];
    if (gethostname(name, sizeof name) == 0) {
        name[sizeof name - 1] = 0;
        snprintf(want, sizeof want, "%s:%d", name, w->port);
        if (strcmp(host, want) == 0) return 1;
    }
    struct ifaddrs *ifs = NULL;
    int ok = 0;
    if (getifaddrs(&ifs) != 0) return 0;
    for (struct ifaddrs *i = ifs; i && !ok; i = i->ifa_next) {
        char addr[INET6_ADDRSTRLEN];
        if (!i->ifa_addr) continue;
        if (i->ifa_addr->sa_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, addr, sizeof addr);
            snprintf(want, sizeof want, "%s:%d", addr, w->port);
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, addr, sizeof addr);
            snprintf(want, sizeof want, "[%s]:%d", addr, w->port);
        } else {
            continue;
        }
        ok = strcmp(host, want) == 0;
    }
    freeifaddrs(ifs);
    return ok;
}

static int token_eq(const char *a, const char *b) {  // in constant time: the token is a secret
    size_t n = strlen(b);
    if (strlen(a) != n) return 0;
    unsigned d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)a[i] ^ (unsigned char)b[i];
    return d == 0;
}

// The token from the cookie, the X-Shardlab-Token header or ?token=; 1 if it is ours.
static int has_token(Web *w, struct mg_connection *c) {
    char v[128];
    const char *h = mg_get_header(c, "X-Shardlab-Token");
    if (h && token_eq(h, w->token)) return 1;
    const char *cookie = mg_get_header(c, "Cookie");
    if (cookie && mg_get_cookie(cookie, "shardlab_token", v, sizeof v) > 0 && token_eq(v, w->token)) return 1;
    const struct mg_request_info *ri = mg_get_request_info(c);
    if (ri->query_string && mg_get_var(ri->query_string, strlen(ri->query_string), "token", v, sizeof v) > 0 &&
        token_eq(v, w->token))
        return 1;
    return 0;
}

// A request that acts: the token, and if the browser says where it comes from, from us.
static int may_act(Web *w, struct mg_connection *c) {
    if (!has_token(w, c)) return 0;
    const char *origin = mg_get_header(c, "Origin");
    if (!origin) return 1;  // not a browser's cross-site request (curl, a test)
    char want[300];
    const char *host = mg_get_header(c, "Host");
    snprintf(want, sizeof want, "http://%s", host ? host : "");
    return strcmp(origin, want) == 0;
}

// A slug, lab or file name: letters, digits and - _ . only, no "..".
static int safe_name(const char *s) {
    if (!s[0] || strlen(s) > 200 || strstr(s, "..")) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') return 0;
    return 1;
}

// ---------------------------------------------------------------------------------------
// Pages

static void page_start(Web *w, struct mg_connection *c, StrBuf *b, const char *title, const char *main_attrs) {
    sb_printf(b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    if (has_token(w, c)) sb_printf(b, "<meta name=\"shardlab-token\" content=\"%s\">", w->token);
    sb_printf(b, "<title>");
    sb_markup_text(b, title);
    sb_printf(b, " · shardlab</title><link rel=\"stylesheet\" href=\"/static/app.css\"></head><body>\n"
                 "<header><nav aria-label=\"site\"><a class=\"brand\" href=\"/\">shardlab</a> "
                 "<a href=\"/#lessons\">Lessons</a> <a href=\"/#lexicon\">Lexicon</a> <a href=\"/#labs\">Labs</a> "
                 "<a href=\"/#runs\">Runs</a></nav></header>\n<main %s>\n", main_attrs ? main_attrs : "");
}

static void page_end(StrBuf *b, const char *script1, const char *script2) {
    sb_printf(b, "</main>\n");
    if (script1) sb_printf(b, "<script src=\"%s\"></script>\n", script1);
    if (script2) sb_printf(b, "<script src=\"%s\"></script>\n", script2);
    sb_printf(b, "</body></html>\n");
}

// The token in the URL the server printed: remembered in a cookie only this site sends.
static int send_page(Web *w, struct mg_connection *c, StrBuf *b) {
    char cookie[160] = "";
    const struct mg_request_info *ri = mg_get_request_info(c);
    char v[128];
    if (ri->query_string && mg_get_var(ri->query_string, strlen(ri->query_string), "token", v, sizeof v) > 0 &&
        token_eq(v, w->token))
        snprintf(cookie, sizeof cookie, "Set-Cookie: shardlab_token=%s; Path=/; HttpOnly; SameSite=Strict\r\n", w->token);
    reply(c, 200, "text/html; charset=utf-8", b->data, b->len, cookie);
    return 200;
}

// Markdown to HTML (md4c-html), then wiki links made real: [[slug]] becomes a link to the term
// or lesson, named as the term is; then every tag checked (web_html_filter: html.c says what
// is trusted in a course file and what is not).
static void md_out(const MD_CHAR *t, MD_SIZE n, void *u) { sb_append(u, t, n); }

static void render_md(StrBuf *page, const char *md, size_t n) {
    StrBuf html, *b = &html;
    sb_init(&html);
    sb_append(&html, "", 0);
    StrBuf raw;
    sb_init(&raw);
    sb_append(&raw, "", 0);
    md_html(md, (MD_SIZE)n, md_out, &raw, MD_DIALECT_GITHUB | MD_FLAG_WIKILINKS, 0);
    const char *open = "<x-wikilink data-target=\"", *close = "</x-wikilink>";
    const char *p = raw.data;
    for (const char *at; (at = strstr(p, open));) {
        sb_append(b, p, (size_t)(at - p));
        const char *t = at + strlen(open), *q = strchr(t, '"'), *gt = q ? strchr(q, '>') : NULL,
                   *end = gt ? strstr(gt, close) : NULL;
        if (!end || !q) {  // not one md4c wrote (raw HTML in the text): shown as text
            sb_printf(b, "&lt;");
            p = at + 1;
            continue;
        }
        char target[128];
        snprintf(target, sizeof target, "%.*s", (int)(q - t), t);
        const char *name = lexicon_link_name(target, strlen(target), &lexicon);
        int is_term = lexicon_term(&lexicon, target) != NULL;
        if (name && safe_name(target)) {
            sb_printf(b, "<a class=\"%s\" href=\"/%s/%s\">", is_term ? "term" : "lesson", is_term ? "lexicon" : "lessons", target);
            sb_markup_text(b, name);
            sb_printf(b, "</a>");
        } else {  // a link to nothing: its text, marked
            sb_printf(b, "<span class=\"dangling\">");
            sb_append(b, gt + 1, (size_t)(end - gt - 1));
            sb_printf(b, "</span>");
        }
        p = end + strlen(close);
    }
    sb_printf(b, "%s", p);
    sb_free(&raw);
    web_html_filter(page, html.data, html.len);
    sb_free(&html);
}

// A file's bytes (markdown, a static file), or NULL; free() it.
static char *read_text(const char *path, size_t *n) {
    StrBuf b;
    sb_init(&b);
    if (sb_read_file(&b, path, (size_t)64 << 20) < 0) return NULL;
    *n = b.len;
    return b.data;
}

// The labs a term names in its header ("`ddp`, `zero`"), as Run buttons.
static void lab_buttons(StrBuf *b, const char *labs) {
    int any = 0;
    for (const char *p = strchr(labs, '`'); p; p = strchr(p + 1, '`')) {
        const char *q = strchr(p + 1, '`');
        if (!q) break;
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(q - p - 1), p + 1);
        if (catalog_lab(name)) {
            if (!any++) sb_printf(b, "<aside class=\"labs\"><h2>Run it</h2><ul>");
            sb_printf(b, "<li><a class=\"button\" href=\"/labs/%s\">Run %s</a></li>", name, name);
        }
        p = q;
    }
    if (any) sb_printf(b, "</ul></aside>\n");
}

static int page_markdown(Web *w, struct mg_connection *c, const char *kind, const char *slug) {
    if (!safe_name(slug)) return not_found(c);
    const LexTerm *term = strcmp(kind, "lexicon") == 0 ? lexicon_term(&lexicon, slug) : NULL;
    const char *title = NULL;
    if (term) title = term->title;
    for (int i = 0; !title && strcmp(kind, "lessons") == 0 && i < lexicon.nlessons; i++)
        if (strcmp(lexicon.lessons[i].slug, slug) == 0) title = lexicon.lessons[i].title;
    if (!title) return not_found(c);
    char path[8400];
    snprintf(path, sizeof path, "%s/%s/%s.md", w->root, kind, slug);
    size_t n;
    char *md = read_text(path, &n);
    if (!md) return not_found(c);
    StrBuf b;
    sb_init(&b);
    page_start(w, c, &b, title, NULL);
    sb_printf(&b, "<article class=\"md\">\n");
    render_md(&b, md, n);
    sb_printf(&b, "</article>\n");
    if (term) lab_buttons(&b, term->labs);
    page_end(&b, NULL, NULL);
    int st = send_page(w, c, &b);
    sb_free(&b);
    free(md);
    return st;
}

static int page_home(Web *w, struct mg_connection *c) {
    StrBuf b;
    sb_init(&b);
    page_start(w, c, &b, "Distributed training from scratch", "id=\"home\"");
    sb_printf(&b, "<h1>shardlab</h1><p>Distributed training from scratch: read a lesson, run its lab, watch it live.</p>\n");
    sb_printf(&b, "<section id=\"lessons\"><h2>Lessons</h2><ul class=\"lessons\">");  // (titles carry their numbers)
    for (int i = 0; i < lexicon.nlessons; i++) {
        sb_printf(&b, "<li><a href=\"/lessons/%s\">", lexicon.lessons[i].slug);
        sb_markup_text(&b, lexicon.lessons[i].title);
        sb_printf(&b, "</a></li>");
    }
    sb_printf(&b, "</ul></section>\n<section id=\"lexicon\"><h2>Lexicon</h2>"
                  "<label for=\"lexicon-search\">Search the lexicon</label> "
                  "<input id=\"lexicon-search\" type=\"search\" placeholder=\"all-reduce, zero 3, bubble...\" autocomplete=\"off\">");
    for (int cat = 0; cat < LEXICON_NCATEGORIES; cat++) {
        sb_printf(&b, "<div class=\"category\"><h3>%s</h3><ul>", LEXICON_CATEGORIES[cat]);
        for (int i = 0; i < lexicon.n; i++) {
            const LexTerm *t = &lexicon.t[i];
            if (strcmp(t->category, LEXICON_CATEGORIES[cat]) != 0) continue;
            sb_printf(&b, "<li data-search=\"");
            sb_markup_text(&b, t->slug);
            sb_printf(&b, " ");
            sb_markup_text(&b, t->title);
            sb_printf(&b, " ");
            sb_markup_text(&b, t->aka);
            sb_printf(&b, "\"><a href=\"/lexicon/%s\">", t->slug);
            sb_markup_text(&b, t->title);
            sb_printf(&b, "</a></li>");
        }
        sb_printf(&b, "</ul></div>");
    }
    sb_printf(&b, "</section>\n<section id=\"labs\"><h2>Labs</h2><ul>");
    for (int i = 0; i < catalog_nlabs; i++)
        sb_printf(&b, "<li><a href=\"/labs/%s\">%s</a>: %s</li>", catalog_labs[i].name, catalog_labs[i].name,
                  catalog_labs[i].title);
    sb_printf(&b, "</ul></section>\n<section id=\"runs\"><h2>Recent runs</h2><ul id=\"run-list\"></ul></section>\n");
    page_end(&b, "/static/home.js", NULL);
    int st = send_page(w, c, &b);
    sb_free(&b);
    return st;
}

// One option of the catalog as a form field: its bounds and names are what POST /api/runs checks.
static void field_input(StrBuf *b, const CatOption *f) {
    sb_printf(b, "<p><label for=\"f-%s\">--%s</label> ", f->name, f->name);
    if (f->flags & CAT_RUN) {  // lab.js offers the finished runs (GET /api/runs)
        sb_printf(b, "<select id=\"f-%s\" name=\"%s\" data-runs><option value=\"\">(none)</option></select>", f->name, f->name);
    } else if (f->kind == OPT_FLAG) {
        sb_printf(b, "<input type=\"checkbox\" id=\"f-%s\" name=\"%s\">", f->name, f->name);
    } else if (f->kind == OPT_STRING && f->choices) {
        sb_printf(b, "<select id=\"f-%s\" name=\"%s\"><option value=\"\">(default)</option>", f->name, f->name);
        for (const char *p = f->choices; *p;) {
            size_t k = strcspn(p, "|");
            sb_printf(b, "<option>%.*s</option>", (int)k, p);
            p += k + (p[k] != 0);
        }
        sb_printf(b, "</select>");
    } else if (f->kind == OPT_STRING || f->kind == OPT_BYTES) {
        sb_printf(b, "<input id=\"f-%s\" name=\"%s\" maxlength=\"64\" placeholder=\"%s\">", f->name, f->name,
                  f->dflt ? f->dflt : "");
    } else if (f->kind == OPT_U64) {
        sb_printf(b, "<input type=\"number\" id=\"f-%s\" name=\"%s\" min=\"0\" step=\"1\">", f->name, f->name);
    } else {
        sb_printf(b, "<input type=\"number\" id=\"f-%s\" name=\"%s\" min=\"%g\" max=\"%g\" step=\"%s\">", f->name,
                  f->name, f->min, f->max, f->kind == OPT_INT ? "1" : "any");
    }
    sb_printf(b, " <small>");
    sb_markup_text(b, f->help);
    sb_printf(b, "</small></p>");
}

static int page_lab(Web *w, struct mg_connection *c, const char *name) {
    const CatLab *lab = safe_name(name) ? catalog_lab(name) : NULL;
    if (!lab) return not_found(c);
    StrBuf b;
    sb_init(&b);
    char attrs[96];
    snprintf(attrs, sizeof attrs, "id=\"lab\" data-lab=\"%s\"", lab->name);
    page_start(w, c, &b, lab->name, attrs);
    sb_printf(&b, "<h1>Lab: %s</h1><p>%s. Runs as <code>shardlab run %s -n N</code>.</p>\n", lab->name, lab->title, lab->name);
    sb_printf(&b, "<form id=\"lab-form\"><fieldset><legend>Run</legend>"
                  "<p><label for=\"f-n\">ranks (N)</label> <input type=\"number\" id=\"f-n\" name=\"n\" min=\"1\" max=\"%d\" value=\"%d\"></p>"
                  "<p><label for=\"f-steps\">steps</label> <input type=\"number\" id=\"f-steps\" name=\"steps\" min=\"1\" max=\"100000\" value=\"100\"></p>",
              lab->max_world ? lab->max_world : 8, lab->max_world == 1 ? 1 : 2);
    for (int i = 0; i < lab->noptions; i++)
        if (lab->options[i].flags & CAT_FORM) field_input(&b, &lab->options[i]);
    for (int i = 0; lab->trains && i < catalog_ntrain; i++)
        if (catalog_train[i].flags & CAT_RUN) field_input(&b, &catalog_train[i]);
    sb_printf(&b, "</fieldset><details><summary>Model and data</summary>");
    if (lab->trains) {
        // The shape of the run (POST /api/runs also takes the other options the catalog marks).
        static const char *const shape[] = {"layers", "dim", "batch", "accum", "attn", "mixed"};
        for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++) field_input(&b, catalog_find(lab, shape[k]));
    }
    sb_printf(&b, "</details><p><button type=\"submit\">Start the run</button></p><p id=\"lab-status\" aria-live=\"polite\"></p>"
                  "</form>\n");
    page_end(&b, "/static/lab.js", NULL);
    int st = send_page(w, c, &b);
    sb_free(&b);
    return st;
}

static int page_run(Web *w, struct mg_connection *c, const char *id) {
    if (!safe_name(id) || !runs_exists(w, id)) return not_found(c);
    StrBuf b;
    sb_init(&b);
    char attrs[400];
    snprintf(attrs, sizeof attrs, "id=\"run\" data-run=\"%s\"", id);
    page_start(w, c, &b, id, attrs);
    sb_printf(&b, "<div id=\"dashboard\"><p>Loading run %s…</p></div>\n", id);
    page_end(&b, "/static/vendor/chart.min.js", "/static/run.js");
    int st = send_page(w, c, &b);
    sb_free(&b);
    return st;
}

// ---------------------------------------------------------------------------------------
// Static files: web/static/ and Debian's Chart.js, nothing else

static const char *mime(const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot) return "application/octet-stream";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    if (!strcmp(dot, ".png")) return "image/png";
    if (!strcmp(dot, ".json")) return "application/json";
    return "application/octet-stream";
}

static int send_static(Web *w, struct mg_connection *c, const char *rel) {
    // rel: what follows /static/; each segment a safe name, no "..".
    char copy[512];
    if (strlen(rel) >= sizeof copy) return not_found(c);
    snprintf(copy, sizeof copy, "%s", rel);
    for (char *s = NULL, *seg = strtok_r(copy, "/", &s); seg; seg = strtok_r(NULL, "/", &s))
        if (!safe_name(seg)) return not_found(c);
    char base[4200], path[4800], real[PATH_MAX], real_base[PATH_MAX];
    if (strncmp(rel, "vendor/", 7) == 0) {
        snprintf(base, sizeof base, "%s", DEBIAN_CHARTJS);
        snprintf(path, sizeof path, "%s/%s", base, rel + 7);
    } else {
        snprintf(base, sizeof base, "%s/web/static", w->root);
        snprintf(path, sizeof path, "%s/%s", base, rel);
    }
    // A symbolic link that leads out of the directory is not ours to serve.
    if (!realpath(path, real) || !realpath(base, real_base) || strncmp(real, real_base, strlen(real_base)) != 0 ||
        real[strlen(real_base)] != '/')
        return not_found(c);
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) return not_found(c);
    size_t n;
    char *data = read_text(real, &n);
    if (!data) return not_found(c);
    reply(c, 200, mime(real), data, n, NULL);
    free(data);
    return 200;
}

// ---------------------------------------------------------------------------------------
// The router

// A whole number from a request (a query's value, a header): decimal digits only, nothing
// around them, at most max. 1 with *out, 0 if it is anything else. Eighteen digits at most, so
// strtol never saturates and the caller's arithmetic (Last-Event-ID + 1) never overflows.
static int parse_count(const char *s, long max, long *out) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 18 || strspn(s, "0123456789") != n) return 0;
    long x = strtol(s, NULL, 10);
    if (x > max) return 0;
    *out = x;
    return 1;
}

// The query's `name` as a whole number 0..max: 1 with *out (dflt when absent), 0 if it is
// there but not such a number (a 400: a number we cannot use is not silently another one).
static int query_count(const char *qs, const char *name, long max, long dflt, long *out) {
    char v[32];
    *out = dflt;
    int got = qs ? mg_get_var(qs, strlen(qs), name, v, sizeof v) : -1;
    if (got == -1) return 1;  // absent
    return got >= 0 && parse_count(v, max, out);
}

// GET: the run's grade.json. POST: grade it now (seconds: the grader may start a reference
// run), with the same checks as starting a lab, since it starts processes too.
static int api_grade(Web *w, struct mg_connection *c, const char *method, const char *id) {
    int post = strcmp(method, "POST") == 0;
    if (!post && strcmp(method, "GET") != 0) return reply_json_error(c, 405, "GET or POST");
    if (post && !may_act(w, c))
        return reply_json_error(c, 403, "grading a run needs this server's token (open the URL it printed) and a request from its own pages");
    if (!safe_name(id)) return reply_json_error(c, 404, "no such run");
    StrBuf b;
    sb_init(&b);
    char why[400];
    int st = post ? runs_grade(w, id, &b, why, sizeof why) : runs_grade_json(w, id, &b, why, sizeof why);
    if (st) {
        sb_free(&b);
        return reply_json_error(c, st, why);
    }
    reply(c, 200, "application/json", b.data, b.len, NULL);
    sb_free(&b);
    return 200;
}

static int api(Web *w, struct mg_connection *c, const char *method, const char *rest, const char *qs) {
    if (strcmp(rest, "runs") == 0) {
        if (strcmp(method, "POST") == 0) {
            if (!may_act(w, c)) return reply_json_error(c, 403, "starting a lab needs this server's token (open the URL it printed) and a request from its own pages");
            const char *type = mg_get_header(c, "Content-Type");
            if (!type || strncmp(type, "application/json", 16) != 0) return reply_json_error(c, 400, "send application/json");
            char *body;
            long long got;
            const char *cut;
            int bst = read_body(w, c, &body, &got, &cut);
            if (bst) return reply_json_error(c, bst, cut);
            char err[128], id[256], why[300];
            JsonValue *req = json_parse(body, (size_t)got, err, sizeof err);
            free(body);
            if (!req) return reply_json_error(c, 400, "the body is not JSON");
            int st = runs_start(w, req, id, sizeof id, why, sizeof why);
            json_free(req);
            if (st) return reply_json_error(c, st, why);
            StrBuf b;
            sb_init(&b);
            sb_printf(&b, "{\"id\":");
            sb_json_string(&b, id);
            sb_printf(&b, ",\"url\":\"/runs/%s\"}", id);
            reply(c, 201, "application/json", b.data, b.len, NULL);
            sb_free(&b);
            return 201;
        }
        if (strcmp(method, "GET") != 0) return reply_json_error(c, 405, "GET or POST");
        StrBuf b;
        sb_init(&b);
        runs_list_json(w, &b);
        reply(c, 200, "application/json", b.data, b.len, NULL);
        sb_free(&b);
        return 200;
    }
    if (strncmp(rest, "runs/", 5) != 0) return reply_json_error(c, 404, "no such API");
    char id[256];
    const char *slash = strchr(rest + 5, '/');
    snprintf(id, sizeof id, "%.*s", (int)(slash ? slash - rest - 5 : (long)strlen(rest + 5)), rest + 5);
    if (slash && strcmp(slash, "/grade") == 0) return api_grade(w, c, method, id);
    if (strcmp(method, "GET") != 0) return reply_json_error(c, 404, "no such API");
    if (!safe_name(id)) return reply_json_error(c, 404, "no such run");
    StrBuf b;
    sb_init(&b);
    int rc = -1;
    if (!slash) rc = runs_info_json(w, id, &b);
    else if (strcmp(slash, "/events") == 0) {
        char kind[24] = "", *k = NULL;
        if (qs && mg_get_var(qs, strlen(qs), "kind", kind, sizeof kind) > 0 && safe_name(kind)) k = kind;
        long from, rank;
        if (!query_count(qs, "from", WEB_MAX_EVENT_INDEX, 0, &from) || !query_count(qs, "rank", 63, -1, &rank)) {
            sb_free(&b);
            return reply_json_error(c, 400, "from is an event index (a whole number from 0) and rank a rank (0 to 63)");
        }
        rc = runs_events_json(w, id, from, k, (int)rank, &b);
    } else if (strcmp(slash, "/stream") == 0) {
        sb_free(&b);
        if (!runs_exists(w, id)) return reply_json_error(c, 404, "no such run");
        long from;
        if (!query_count(qs, "from", WEB_MAX_EVENT_INDEX, 0, &from))
            return reply_json_error(c, 400, "from is an event index (a whole number from 0)");
        const char *last = mg_get_header(c, "Last-Event-ID");  // EventSource's own resume: after that one
        if (last && *last) {
            if (!parse_count(last, WEB_MAX_EVENT_INDEX - 1, &from))
                return reply_json_error(c, 400, "Last-Event-ID is the index of an event this server sent (a whole number from 0)");
            from++;
        }
        runs_stream(w, c, id, from);
        return 200;
    }
    if (rc != 0) {
        sb_free(&b);
        return reply_json_error(c, 404, "no such run");
    }
    reply(c, 200, "application/json", b.data, b.len, NULL);
    sb_free(&b);
    return 200;
}

static int route(Web *w, struct mg_connection *c);

int web_route(struct mg_connection *c, void *cbdata) {
    body_read = 0;
    int status = route(cbdata, c);
    if (!body_read && has_body(c)) {  // (see body_read)
        int fd = web_socket(c);
        if (fd >= 0) shutdown(fd, SHUT_RD);
    }
    return status;
}

static int route(Web *w, struct mg_connection *c) {
    runs_reap();
    const struct mg_request_info *ri = mg_get_request_info(c);
    const char *raw = ri->local_uri_raw ? ri->local_uri_raw : ri->local_uri;
    if (!host_ok(w, c)) {
        const char *body = "this server answers only to its own name (127.0.0.1, localhost)\n";
        reply(c, 403, "text/plain; charset=utf-8", body, strlen(body), NULL);
        return 403;
    }
    // "..", in any spelling the decoder left, never reaches a file name.
    if (!raw || raw[0] != '/' || strstr(raw, "..") || strstr(ri->local_uri, "..") || strchr(raw, '\\')) return not_found(c);
    const char *u = ri->local_uri, *m = ri->request_method;
    if (strncmp(u, "/api/", 5) == 0) return api(w, c, m, u + 5, ri->query_string);
    if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
        reply(c, 405, "text/plain", "GET only\n", 9, "Allow: GET\r\n");
        return 405;
    }
    if (strcmp(u, "/") == 0 || strcmp(u, "/index.html") == 0) return page_home(w, c);
    if (strcmp(u, "/favicon.ico") == 0) {  // none: say so without an error in the console
        reply(c, 204, "image/x-icon", "", 0, NULL);
        return 204;
    }
    if (strncmp(u, "/static/", 8) == 0) return send_static(w, c, u + 8);
    if (strncmp(u, "/lexicon/", 9) == 0) return page_markdown(w, c, "lexicon", u + 9);
    if (strncmp(u, "/lessons/", 9) == 0) return page_markdown(w, c, "lessons", u + 9);
    if (strncmp(u, "/labs/", 6) == 0) return page_lab(w, c, u + 6);
    if (strncmp(u, "/runs/", 6) == 0) return page_run(w, c, u + 6);
    if (strcmp(u, "/lexicon") == 0 || strcmp(u, "/lessons") == 0 || strcmp(u, "/labs") == 0 || strcmp(u, "/runs") == 0) {
        char loc[64];
        snprintf(loc, sizeof loc, "Location: /#%s\r\n", u + 1);
        reply(c, 302, "text/plain", "", 0, loc);
        return 302;
    }
    return not_found(c);
}

// ---------------------------------------------------------------------------------------
// Start and stop

static const char *WEB_USAGE =
    "usage: shardlab web [--host ADDR] [--port P] [--runs DIR] [--request-timeout S]\n"
    "\n"
    "The course in the browser: lessons, the lexicon, the labs, and runs live. Prints the URL to\n"
    "open, with this server's token (starting a lab from the browser needs it).\n"
    "  --host ADDR   the address to listen on (default 127.0.0.1: this machine only; anything\n"
    "                else is reachable from the network, and the server says so)\n"
    "  --port P      the port (default 8080; 0: any free one)\n"
    "  --runs DIR    the run directories (default $SHARDLAB_RUNS, else runs/)\n"
    "  --request-timeout S   how long a client may take to send a request, body included\n"
    "                (default 30 seconds)\n"
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
    for (int i = 2; i < argc; i++) {
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
        } else if (!strcmp(a, "--runs")) {
            snprintf(w.runs, sizeof w.runs, "%s", v);
        } else {
            usage_error("shardlab web", "unknown option '%s'", a);
        }
        i++;
    }
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) die(NULL, "cannot find this program's path");
    exe[k] = 0;
    snprintf(w.launcher, sizeof w.launcher, "%s", exe);
    char err[512], dir[4200];
    snprintf(dir, sizeof dir, "%s/lexicon", root);
    if (lexicon_load(&lexicon, dir, err, sizeof err) != 0) usage_error("shardlab web", "%s (set SHARDLAB_ROOT)", err);
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
    printf("shardlab web: serving %s (lexicon: %d terms, %d lessons; runs: %s)\n", root, lexicon.n, lexicon.nlessons, w.runs);
    const char *url_host = strcmp(w.host, "0.0.0.0") == 0 || strcmp(w.host, "::") == 0 ? "127.0.0.1" : w.host;
    printf("shardlab web: open http://%s%s%s:%d/?token=%s\n", ipv6 && url_host == w.host ? "[" : "", url_host,
           ipv6 && url_host == w.host ? "]" : "", w.port, w.token);
    fflush(stdout);
    while (!w.stopping) {
        struct timespec ts = {0, 200000000L};
        nanosleep(&ts, NULL);
        runs_reap();
        deadlines_enforce();
    }
    printf("shardlab web: stopping\n");
    fflush(stdout);
    mg_stop(ctx);  // every stream sees `stopping` within STREAM_IDLE_MS and returns
    runs_free_all();
    lexicon_free(&lexicon);
    return 0;
}
