// runs_stream.c — a run's events, live, as Server-Sent Events (GET /api/runs/<id>/stream):
// from any index, until the run ends, the client leaves, or the server stops. See web.h.
#include <civetweb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "runs_internal.h"

#define STREAM_IDLE_MS 100
#define KEEPALIVE_S 10

// ---------------------------------------------------------------------------------------
// The live stream

// Whether the stream's client has gone: its socket has been closed or reset (it reads as end of
// file now). Checked every idle tick, so a thread is not held for a client that left until a
// keep-alive write fails. (An EventSource never half-closes: end of file means gone.)
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return 1;
    char c;
    return (p.revents & POLLIN) && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static int open_streams;  // (under streams_lock)
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;

void runs_stream(Web *w, struct mg_connection *conn, const char *id, long from) {
    // At most WEB_MAX_STREAMS at once: each holds a thread, and the others serve pages and the API.
    pthread_mutex_lock(&streams_lock);
    int admitted = open_streams < WEB_MAX_STREAMS;
    open_streams += admitted;
    pthread_mutex_unlock(&streams_lock);
    if (!admitted) {
        const char *body = "{\"error\":\"too many live streams open on this server: try again in a few seconds\"}";
        mg_printf(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                        "Retry-After: 5\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n%s",
                  strlen(body), body);
        return;
    }
    mg_printf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                    "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n");
    mg_printf(conn, "retry: 1000\n\n");
    int fd = web_socket(conn);
    long next = from < 0 ? 0 : from;
    time_t last_write = time(NULL);
    StrBuf chunk;
    sb_init(&chunk);
    while (!w->stopping && !client_gone(fd)) {
        Run *r = get_run(w, id);  // (locked; fetched each round: the cache may have forgotten it)
        if (!r) break;
        sb_reset(&chunk);
        poll_run(r);
        char status[16];
        snprintf(status, sizeof status, "%s", run_status(r));  // (before the events: "stopped" reads the logs to their end)
        for (; next < r->n && chunk.len < (1 << 20); next++) sb_printf(&chunk, "id: %ld\ndata: %s\n\n", next, r->lines[next]);
        int ended = strcmp(status, "running") != 0 && next >= r->n;
        pthread_mutex_unlock(&r->lock);
        if (chunk.len) {
            if (mg_write(conn, chunk.data, chunk.len) <= 0) break;  // the client left
            last_write = time(NULL);
        }
        if (ended) {
            mg_printf(conn, "event: end\ndata: {\"status\":\"%s\"}\n\n", status);
            break;
        }
        if (time(NULL) - last_write >= KEEPALIVE_S) {  // a comment: keeps proxies open
            if (mg_printf(conn, ": keep-alive\n\n") <= 0) break;
            last_write = time(NULL);
        }
        struct timespec ts = {0, STREAM_IDLE_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    sb_free(&chunk);
    pthread_mutex_lock(&streams_lock);
    open_streams--;
    pthread_mutex_unlock(&streams_lock);
}
