// http.c — what every request of the web server goes through: the replies, finding a
// connection's socket, reading a body within a deadline, and the checks (Host, the token,
// Origin, safe names). See web.h for why the checks are what they are.
#include <arpa/inet.h>
#include <civetweb.h>
#include <ctype.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/harness/check.h"
#include "common/runfiles/runlog.h"
#include "web_internal.h"

// ---------------------------------------------------------------------------------------
// Replies

// Headers and body in one write: two small writes on a kept-alive connection meet Nagle's
// algorithm and the client's delayed ACK, and every reply would wait ~40 ms for nothing.
void web_reply(struct mg_connection *c, int status, const char *type, const char *body, size_t n,
               const char *extra_headers) {
    const char *reason = status == 200 ? "OK" : status == 201 ? "Created" : status == 204 ? "No Content" : status == 302 ? "Found"
                       : status == 400 ? "Bad Request" : status == 403 ? "Forbidden" : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed" : status == 409 ? "Conflict" : status == 411 ? "Length Required" : status == 413 ? "Payload Too Large"
                       : status == 429 ? "Too Many Requests"
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

int web_reply_busy(struct mg_connection *c) {
    const char *busy = "{\"error\":\"one check at a time: another is running; try again in a few seconds\"}";
    web_reply(c, 429, "application/json", busy, strlen(busy), "Retry-After: 5\r\n");
    return 429;
}

int web_reply_json_error(struct mg_connection *c, int status, const char *why) {
    StrBuf b;
    sb_init(&b);
    sb_printf(&b, "{\"error\":");
    sb_json_string(&b, why);
    sb_printf(&b, "}");
    web_reply(c, status, "application/json", b.data, b.len, NULL);
    sb_free(&b);
    return status;
}

int web_not_found(struct mg_connection *c) {
    const char *body = "<!doctype html><meta charset=utf-8><title>Not found</title><p>Not found. <a href=\"/\">Home</a>\n";
    web_reply(c, 404, "text/html; charset=utf-8", body, strlen(body), NULL);
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

void web_deadlines_enforce(void) {
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
_Thread_local int web_body_read;

int web_has_body(struct mg_connection *c) {
    return mg_get_request_info(c)->content_length > 0 || mg_get_header(c, "Transfer-Encoding") != NULL;
}

// The request's body, read within the request timeout: 0 with it in *out (NUL-terminated;
// free() it), or the HTTP status to answer with why.
int web_read_body(Web *w, struct mg_connection *c, char **out, long long *n, const char **why) {
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
    web_body_read = 1;
    *out = body, *n = got;
    return 0;
}

// ---------------------------------------------------------------------------------------
// The checks

// The headers the checks read: the server's name, where a request comes from, its token
// (two ways), and where its body ends (two copies that disagree are how a request is
// smuggled past a proxy). HTTP lets none of them be repeated (RFC 9110 5.3: only list-valued
// fields may be), and each is read once by name.
static const char *const SINGLE_HEADERS[] = {"Host", "Origin", "X-Shardlab-Token", "Cookie", "Content-Length",
                                             "Transfer-Encoding"};

const char *web_header_twice(struct mg_connection *c) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    for (size_t k = 0; k < sizeof SINGLE_HEADERS / sizeof SINGLE_HEADERS[0]; k++) {
        int seen = 0;
        for (int i = 0; i < ri->num_headers; i++) seen += strcasecmp(ri->http_headers[i].name, SINGLE_HEADERS[k]) == 0;
        if (seen > 1) return SINGLE_HEADERS[k];
    }
    return NULL;
}

// Host must name this server: a page on another site that got the browser to resolve its own
// name to 127.0.0.1 (DNS rebinding) still sends its own name here.
int web_host_ok(Web *w, struct mg_connection *c) {
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

int web_token_eq(const char *a, const char *b) {  // in constant time: the token is a secret
    size_t n = strlen(b);
    if (strlen(a) != n) return 0;
    unsigned d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)a[i] ^ (unsigned char)b[i];
    return d == 0;
}

// The token from the cookie, the X-Shardlab-Token header or ?token=; 1 if it is ours.
int web_has_token(Web *w, struct mg_connection *c) {
    char v[128];
    const char *h = mg_get_header(c, "X-Shardlab-Token");
    if (h && web_token_eq(h, w->token)) return 1;
    const char *cookie = mg_get_header(c, "Cookie");
    if (cookie && mg_get_cookie(cookie, "shardlab_token", v, sizeof v) > 0 && web_token_eq(v, w->token)) return 1;
    const struct mg_request_info *ri = mg_get_request_info(c);
    if (ri->query_string && mg_get_var(ri->query_string, strlen(ri->query_string), "token", v, sizeof v) > 0 &&
        web_token_eq(v, w->token))
        return 1;
    return 0;
}

// A request that acts: the token, and if the browser says where it comes from, from us.
int web_may_act(Web *w, struct mg_connection *c) {
    if (!web_has_token(w, c)) return 0;
    const char *origin = mg_get_header(c, "Origin");
    if (!origin) return 1;  // not a browser's cross-site request (curl, a test)
    char want[300];
    const char *host = mg_get_header(c, "Host");
    snprintf(want, sizeof want, "http://%s", host ? host : "");
    return strcmp(origin, want) == 0;
}

// A slug, lab or file name: letters, digits and - _ . only, no "..".
int web_safe_name(const char *s) {
    if (!s[0] || strlen(s) > 200 || strstr(s, "..")) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') return 0;
    return 1;
}
