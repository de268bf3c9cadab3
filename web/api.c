// api.c — the web server's JSON API under /api/: the runs, their events and streams, starting
// a lab, grading a run (web/runs*.c do the work), a run's timeline for Perfetto
// (GET /api/runs/<id>/trace, command/runs/trace.h), the memory planner (web/plan.c) and a copy's TODO
// regions checked (POST /api/checks, web/checks.c). See web.h for the routes.
#include <civetweb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command/runs/trace.h"
#include "runs_internal.h"
#include "web_internal.h"

// ---------------------------------------------------------------------------------------
// Numbers from a request

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

// ---------------------------------------------------------------------------------------
// The routes under /api/

// GET: the run's grade.json. POST: grade it now (seconds: the grader may start a reference
// run), with the same checks as starting a lab, since it starts processes too.
static int api_grade(Web *w, struct mg_connection *c, const char *method, const char *id) {
    int post = strcmp(method, "POST") == 0;
    if (!post && strcmp(method, "GET") != 0) return web_reply_json_error(c, 405, "GET or POST");
    if (post && !web_may_act(w, c))
        return web_reply_json_error(c, 403, "grading a run needs this server's token (open the URL it printed) and a request from its own pages");
    if (!web_safe_name(id)) return web_reply_json_error(c, 404, "no such run");
    StrBuf b;
    sb_init(&b);
    char why[400];
    int st = post ? runs_grade(w, id, &b, why, sizeof why) : runs_grade_json(w, id, &b, why, sizeof why);
    if (st) {
        sb_free(&b);
        return web_reply_json_error(c, st, why);
    }
    web_reply(c, 200, "application/json", b.data, b.len, NULL);
    sb_free(&b);
    return 200;
}

// GET: the run's timeline as Chrome trace-event JSON (command/runs/trace.h: what `shardlab trace`
// writes), as a download for ui.perfetto.dev or chrome://tracing. Read from the run's files
// at each request, so a live run gives what it has logged so far.
static int api_trace(Web *w, struct mg_connection *c, const char *method, const char *id) {
    if (strcmp(method, "GET") != 0) return web_reply_json_error(c, 405, "GET only");
    char dir[4400];
    if (!web_safe_name(id) || !run_exists(w, id, dir, sizeof dir)) return web_reply_json_error(c, 404, "no such run");
    StrBuf b;
    sb_init(&b);
    TraceStats st;
    char why[600], msg[700], headers[400];
    if (trace_run(dir, &b, &st, why, sizeof why) != 0) {
        sb_free(&b);
        snprintf(msg, sizeof msg, "the run has no timeline yet: %s", why);  // (why names files, not paths)
        return web_reply_json_error(c, 409, msg);
    }
    // (id is a safe name: letters, digits, '-', '_' and '.', nothing to quote)
    snprintf(headers, sizeof headers,
             "Content-Disposition: attachment; filename=\"%s-trace.json\"\r\n", id);
    web_reply(c, 200, "application/json", b.data, b.len, headers);
    sb_free(&b);
    return 200;
}

int web_api(Web *w, struct mg_connection *c, const char *method, const char *rest, const char *qs) {
    if (strcmp(rest, "runs") == 0) {
        if (strcmp(method, "POST") == 0) {
            if (!web_may_act(w, c)) return web_reply_json_error(c, 403, "starting a lab needs this server's token (open the URL it printed) and a request from its own pages");
            const char *type = mg_get_header(c, "Content-Type");
            if (!type || strncmp(type, "application/json", 16) != 0) return web_reply_json_error(c, 400, "send application/json");
            char *body;
            long long got;
            const char *cut;
            int bst = web_read_body(w, c, &body, &got, &cut);
            if (bst) return web_reply_json_error(c, bst, cut);
            char err[128], id[256], why[768];
            JsonValue *req = json_parse(body, (size_t)got, err, sizeof err);
            free(body);
            if (!req) return web_reply_json_error(c, 400, "the body is not JSON");
            id[0] = 0;
            int st = runs_start(w, req, id, sizeof id, why, sizeof why);
            json_free(req);
            StrBuf b;
            sb_init(&b);
            if (st == 429) {
                // Busy: the reason, and the run that holds the slot (its page says when it
                // ends). Retry-After is how often to ask again, not when it will be free.
                sb_printf(&b, "{\"error\":");
                sb_json_string(&b, why);
                sb_printf(&b, ",\"run\":");
                sb_json_string(&b, id);
                sb_printf(&b, ",\"url\":\"/runs/%s\"}", id);  // (a run id is a safe name)
                web_reply(c, 429, "application/json", b.data, b.len, "Retry-After: 10\r\n");
                sb_free(&b);
                return 429;
            }
            if (st) {
                sb_free(&b);
                return web_reply_json_error(c, st, why);
            }
            sb_printf(&b, "{\"id\":");
            sb_json_string(&b, id);
            sb_printf(&b, ",\"url\":\"/runs/%s\"}", id);
            web_reply(c, 201, "application/json", b.data, b.len, NULL);
            sb_free(&b);
            return 201;
        }
        if (strcmp(method, "GET") != 0) return web_reply_json_error(c, 405, "GET or POST");
        StrBuf b;
        sb_init(&b);
        runs_list_json(w, &b);
        web_reply(c, 200, "application/json", b.data, b.len, NULL);
        sb_free(&b);
        return 200;
    }
    if (strcmp(rest, "plan") == 0) return web_api_plan(w, c, method, qs);
    if (strcmp(rest, "plan/check") == 0) return web_api_plan_check(w, c, method, qs);
    if (strcmp(rest, "checks") == 0) return web_api_checks(w, c, method, qs);
    if (strncmp(rest, "runs/", 5) != 0) return web_reply_json_error(c, 404, "no such API");
    char id[256];
    const char *slash = strchr(rest + 5, '/');
    snprintf(id, sizeof id, "%.*s", (int)(slash ? slash - rest - 5 : (long)strlen(rest + 5)), rest + 5);
    if (slash && strcmp(slash, "/grade") == 0) return api_grade(w, c, method, id);
    if (slash && strcmp(slash, "/trace") == 0) return api_trace(w, c, method, id);
    if (strcmp(method, "GET") != 0) return web_reply_json_error(c, 404, "no such API");
    if (!web_safe_name(id)) return web_reply_json_error(c, 404, "no such run");
    StrBuf b;
    sb_init(&b);
    int rc = -1;
    if (!slash) rc = runs_info_json(w, id, &b);
    else if (strcmp(slash, "/events") == 0) {
        char kind[24] = "", *k = NULL;
        if (qs && mg_get_var(qs, strlen(qs), "kind", kind, sizeof kind) > 0 && web_safe_name(kind)) k = kind;
        long from, rank;
        if (!query_count(qs, "from", WEB_MAX_EVENT_INDEX, 0, &from) || !query_count(qs, "rank", 63, -1, &rank)) {
            sb_free(&b);
            return web_reply_json_error(c, 400, "from is an event index (a whole number from 0) and rank a rank (0 to 63)");
        }
        rc = runs_events_json(w, id, from, k, (int)rank, &b);
    } else if (strcmp(slash, "/stream") == 0) {
        sb_free(&b);
        if (!runs_exists(w, id)) return web_reply_json_error(c, 404, "no such run");
        long from;
        if (!query_count(qs, "from", WEB_MAX_EVENT_INDEX, 0, &from))
            return web_reply_json_error(c, 400, "from is an event index (a whole number from 0)");
        const char *last = mg_get_header(c, "Last-Event-ID");  // EventSource's own resume: after that one
        if (last && *last) {
            if (!parse_count(last, WEB_MAX_EVENT_INDEX - 1, &from))
                return web_reply_json_error(c, 400, "Last-Event-ID is the index of an event this server sent (a whole number from 0)");
            from++;
        }
        runs_stream(w, c, id, from);
        return 200;
    }
    if (rc != 0) {
        sb_free(&b);
        return web_reply_json_error(c, 404, "no such run");
    }
    web_reply(c, 200, "application/json", b.data, b.len, NULL);
    sb_free(&b);
    return 200;
}
