// web_internal.h — what the web server's files share: the lexicon the pages read, the replies
// and checks of every request (http.c), the pages and static files (pages.c) and the JSON API
// (api.c), which the router (web.c) calls.
//
// Defines: web_lexicon, web_reply(), web_reply_json_error(), web_reply_busy(), web_not_found(), web_deadlines_enforce(),
//          web_body_read, web_has_body(), web_read_body(), web_header_twice(), web_host_ok(),
//          web_token_eq(), web_has_token(),
//          web_may_act(), web_safe_name(), web_page_home(), web_page_markdown(), web_page_lab(),
//          web_page_run(), web_page_start(), web_page_end(), web_send_page(), web_page_plan(),
//          web_api_plan(), web_api_plan_check(), web_checks_section(), web_api_checks(), web_send_static(),
//          web_api().
#ifndef SHARDLAB_WEB_INTERNAL_H
#define SHARDLAB_WEB_INTERNAL_H

#include <stddef.h>

#include "command/course/course.h"
#include "web.h"

// The course's terms and lessons: loaded by web_main (web.c), read by the pages.
extern Lexicon web_lexicon;

// ---- http.c: replies, the request's body, the checks ------------------------------------
// The reply, headers and body in one write; extra_headers: "Name: value\r\n" lines, or NULL.
void web_reply(struct mg_connection *c, int status, const char *type, const char *body, size_t n,
               const char *extra_headers);
// {"error": why} with that status; returns the status.
int web_reply_json_error(struct mg_connection *c, int status, const char *why);
// 429 with Retry-After, for an action that runs one at a time and is running; returns 429.
int web_reply_busy(struct mg_connection *c);
// The 404 page; returns 404.
int web_not_found(struct mg_connection *c);
// Shuts the reading side of every socket past its body's deadline (web_main's loop calls it).
void web_deadlines_enforce(void);
// Whether this request's body has been read (the router resets it, web_read_body sets it).
extern _Thread_local int web_body_read;
int web_has_body(struct mg_connection *c);
// The request's body, read within the request timeout: 0 with it in *out (NUL-terminated;
// free() it), or the HTTP status to answer with why.
int web_read_body(Web *w, struct mg_connection *c, char **out, long long *n, const char **why);
// The first header of those the checks read (Host, Origin, the token's, the cookie, the
// body's) that the request sends more than once, or NULL.
const char *web_header_twice(struct mg_connection *c);
// Host names this server (DNS rebinding).
int web_host_ok(Web *w, struct mg_connection *c);
// a == b, in constant time.
int web_token_eq(const char *a, const char *b);
// The request carries this server's token (cookie, X-Shardlab-Token or ?token=).
int web_has_token(Web *w, struct mg_connection *c);
// A request that acts: the token, and if the browser says where it comes from, from us.
int web_may_act(Web *w, struct mg_connection *c);
// A slug, lab or file name: letters, digits and - _ . only, no "..".
int web_safe_name(const char *s);

// ---- pages.c: the pages and static files; each returns the HTTP status it answered -------
int web_page_home(Web *w, struct mg_connection *c);
// kind: "lexicon" or "lessons"
int web_page_markdown(Web *w, struct mg_connection *c, const char *kind, const char *slug);
int web_page_lab(Web *w, struct mg_connection *c, const char *name);
// A page's head and navigation (stylesheet: one more than app.css, or NULL), its end (scripts
// or NULL), and the page sent (remembering the token of the URL the server printed).
void web_page_start(Web *w, struct mg_connection *c, StrBuf *b, const char *title, const char *main_attrs,
                    const char *stylesheet);
// Ends a page: </main>, then a <script> for each path given, up to a NULL.
void web_page_end(StrBuf *b, ...) __attribute__((sentinel));
int web_send_page(Web *w, struct mg_connection *c, StrBuf *b);
// plan.c: /plan, the planner's page, /api/plan, its plan as JSON, and /api/plan/check, the
// plan checked against the lab run at its shape (qs: the query).
int web_page_plan(Web *w, struct mg_connection *c, const char *qs);
int web_api_plan(Web *w, struct mg_connection *c, const char *method, const char *qs);
int web_api_plan_check(Web *w, struct mg_connection *c, const char *method, const char *qs);
// checks.c: a lab page's "Your TODO regions" (nothing without --checks), and
// /api/checks?lab=L, make check's driver run on them (qs: the query).
void web_checks_section(Web *w, StrBuf *b, const char *lab);
int web_api_checks(Web *w, struct mg_connection *c, const char *method, const char *qs);
int web_page_run(Web *w, struct mg_connection *c, const char *id);
// rel: what follows /static/
int web_send_static(Web *w, struct mg_connection *c, const char *rel);

// ---- api.c: /api/<rest> (web.h lists the routes); returns the HTTP status ---------------
int web_api(Web *w, struct mg_connection *c, const char *method, const char *rest, const char *qs);

#endif
