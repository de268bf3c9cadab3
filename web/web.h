// web.h — the web server: the course (lexicon, lessons), the labs and their runs, live, in the
// browser. CivetWeb serves, md4c renders.
//
// Defines: Web, WEB_MAX_BODY, WEB_MAX_EVENT_INDEX, WEB_THREADS, WEB_MAX_STREAMS, web_main(), web_route(),
//          web_socket(), runs_list_json(), runs_info_json(),
//          runs_events_json(), runs_exists(), runs_stream(), runs_start(), runs_reap(), runs_free_all(),
//          runs_ended(), runs_grade_json(), runs_grade(),
//          web_html_filter().
//
// What it serves (everything else is 404):
//   /                           home: lessons in order, lexicon index with instant search, labs, recent runs
//   /lexicon/<slug>             a term, rendered (wiki links become real links), its labs with a Run button
//   /lessons/<slug>             a lesson, rendered
//   /labs/<name>                a form to start the lab (N 1-8, steps, the lab's options)
//   /runs/<id>                  the live dashboard of a run (web/static/run.js draws it)
//   /plan?lab=L&...             the memory planner: the plan of a layout by category, its form,
//                               and "Check it" (web/static/plan.js)
//                               (with --checks, a lab's page also lists the TODO regions it runs,
//                               with "Check them": web/checks.c, web/static/checks.js)
//   /static/<file>              web/static/, /static/vendor/chart.min.js (Debian's libjs-chart.js) and
//                               /static/katex/ (Debian's libjs-katex: the formulas' mathematics, its fonts)
//   GET  /api/runs              recent runs, and how many directories with a run's log were left
//                               out ("unlisted": their names are not ids the server serves)
//   GET  /api/runs/<id>         one run: meta.json, summary.json, status, whether it has a
//                               grade.json, and how the launcher this server started ended
//   GET  /api/runs/<id>/events?from=N[&kind=K][&rank=R]   its events from index N (resumable)
//   GET  /api/runs/<id>/stream?from=N                      the same as Server-Sent Events, live
//   POST /api/runs              start a lab: {"lab","n","steps","options":{...}}, known labs and
//                               the options and bounds of the catalog (common/harness/catalog.h) only,
//                               run through the launcher, never a shell; at most --max-runs at
//                               once (429 beyond, naming a run that holds a slot), and only if
//                               it fits in memory beside the runs going on (429) and alone (400)
//   GET  /api/runs/<id>/grade   the run's grade.json (404 until it has one)
//   POST /api/runs/<id>/grade   grade the run (labs/command/grade: `shardlab grade`), once it has ended
//                               (409 before): writes grade.json and grade.xml, answers the grade
//   GET  /api/runs/<id>/trace   its timeline as Chrome trace-event JSON, for ui.perfetto.dev (`shardlab trace`)
//   GET  /api/plan?lab=L&...    the plan as `shardlab plan ... --json` prints it
//   POST /api/plan/check?lab=L&...   the lab run at that shape for 2 steps and compared with the
//                               plan, as `shardlab plan ... --check --json` prints it: the lab
//                               form's options only, the labs' small shapes only (400), one at
//                               a time (429), needs the token as starting a lab does (403)
//   POST /api/checks?lab=L      with --checks: make check's driver run on lab L's TODO regions
//                               (`check --bin DIR --json NAME...`), its JSON answered: the token
//                               (403), a lab of the catalog (400 none, 404 unknown), one at a
//                               time (429), stopped after 2 minutes (500)
//
// Safety (a page on another website must not be able to start processes on a student's
// machine through their browser): the server binds 127.0.0.1 unless --host says otherwise;
// every request's Host must name this server (DNS rebinding), and each header the checks read
// (Host, Origin, the token's, the cookie, the body's) comes at most once (else 400: which one
// is meant?); a POST must carry the server's token (printed with the URL, as notebook servers
// do: opening that URL sets a SameSite=Strict cookie, and pages echo the token to their own
// scripts) and, if the browser sent an Origin, come from this server's origin. Files are
// served only from the server's own directories, never through "..", encoded or not, nor
// through symbolic links that lead out.
#ifndef SHARDLAB_WEB_H
#define SHARDLAB_WEB_H

#include <stddef.h>

#include "common/runfiles/json.h"

#define WEB_MAX_BODY (64 * 1024)
// The largest event index a request may name (?from=, Last-Event-ID): far past any run's
// events (runs.c keeps at most 2 million), small enough that index + 1 is still a long.
#define WEB_MAX_EVENT_INDEX 1000000000L
// The most labs --max-runs lets the web run at once.
#define WEB_MAX_RUNS 32

struct mg_connection;

typedef struct {
    char root[4096];       // the checkout: lexicon/, lessons/, web/static/
    char runs[4096];       // the run directories
    char launcher[4096];   // build/shardlab, to start labs with
    char labs[4096];       // the lab programs it runs ($SHARDLAB_LABS, else labs/ next to it): the
                           // grader's references run these too
    char checks[4096];     // --checks: make check's programs for a copy of the labs (its driver,
                           // check, and check_<program>), as an absolute path; "": none
    char host[256];        // what we listen on
    int port;
    char token[33];
    int request_timeout_s; // how long a client may take to send a request, its body included
    int max_runs;          // --max-runs: how many labs started from the web may run at once
    volatile int stopping; // set on SIGINT/SIGTERM: streams end, so mg_stop() returns
} Web;

// CivetWeb's worker threads, and how many of them Server-Sent Event streams may hold at once:
// a stream holds its thread until its client leaves, so the rest stay for pages and the API
// whatever the streams do. One stream more is answered 503 with a Retry-After.
#define WEB_THREADS 64
#define WEB_MAX_STREAMS (WEB_THREADS - 8)

// The socket of a connection a handler is serving (CivetWeb gives none), or -1. See http.c.
int web_socket(const struct mg_connection *c);

// `shardlab web [--host H] [--port P] [--runs DIR] [--max-runs N] [--request-timeout S] [--checks DIR]`; root: the
// checkout; labs: the lab programs, as the launcher finds them.
int web_main(int argc, char **argv, const char *root, const char *labs);

// ---- runs (web/runs.c; the stream: runs_stream.c; starting: runs_start.c; grading: runs_grade.c)
// id: a run directory's name under w->runs; 1 if there is such a run (a directory there, its
// name a safe name: letters, digits, '-', '_' and '.', no "..", at most 200 characters).
int runs_exists(Web *w, const char *id);
void runs_list_json(Web *w, StrBuf *out);
int runs_info_json(Web *w, const char *id, StrBuf *out);   // 0, or -1: no such run
int runs_events_json(Web *w, const char *id, long from, const char *kind, int rank, StrBuf *out);
// Writes the SSE stream to conn until the run ends, the client leaves, or the server stops.
void runs_stream(Web *w, struct mg_connection *conn, const char *id, long from);
// Starts a lab from a JSON request; 0 with the run's id, or the HTTP status with why: 400 (the
// request, or a run the machine cannot hold), 429 (wait: id then names a run that is going
// on), 500.
int runs_start(Web *w, const JsonValue *req, char *id, size_t idlen, char *why, size_t whylen);
// Reaps the launchers runs_start() started (only those: the grader waits for its own children),
// and keeps the last of what each wrote.
void runs_reap(void);
void runs_free_all(void);
// 1 once the run has ended (every rank logged its end, summary.json is there, the launcher
// this server started has exited, or its logs have been still for 2 minutes) and, if this
// server started it, its launcher has exited (waited for up to 10 s), 0 while it goes on,
// -1: no such run.
int runs_ended(Web *w, const char *id);
// The run's grade.json into out: 0, or the HTTP status (404: no such run or no grade yet;
// 500: not JSON) with why.
int runs_grade_json(Web *w, const char *id, StrBuf *out, char *why, size_t whylen);
// Grades the run (one grading at a time; the references run w->labs' programs), writes
// grade.json and grade.xml into it and the grade into out: 0, or the HTTP status (404 no
// such run, 409 still running, 500) with why. Takes seconds: it may start a reference run.
int runs_grade(Web *w, const char *id, StrBuf *out, char *why, size_t whylen);

// ---- the HTML of rendered markdown (web/html.c) -----------------------------------------
// Appends html[0..n), md4c-html's rendering of a course file, keeping only the tags and
// attributes a course page uses and the links course_url_ok() takes; anything else is shown
// as text. See html.c for what is trusted and why this holds.
void web_html_filter(StrBuf *out, const char *html, size_t n);

#endif
