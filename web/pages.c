// pages.c — the web server's pages (home, a term or lesson rendered from markdown, a lab's
// form, a run's dashboard) and its static files. See web.h for the routes.
#include <civetweb.h>
#include <limits.h>
#include <md4c-html.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "command/course/course.h"
#include "common/harness/catalog.h"
#include "runs_internal.h"
#include "web_internal.h"

#define DEBIAN_CHARTJS "/usr/share/javascript/chart.js"
#define DEBIAN_KATEX "/usr/share/javascript/katex"

// ---------------------------------------------------------------------------------------
// Pages

// stylesheet: one more than app.css, or NULL.
void web_page_start(Web *w, struct mg_connection *c, StrBuf *b, const char *title, const char *main_attrs,
                       const char *stylesheet) {
    sb_printf(b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    if (web_has_token(w, c)) sb_printf(b, "<meta name=\"shardlab-token\" content=\"%s\">", w->token);
    sb_printf(b, "<title>");
    sb_markup_text(b, title);
    sb_printf(b, " · shardlab</title><link rel=\"stylesheet\" href=\"/static/app.css\">");
    if (stylesheet) sb_printf(b, "<link rel=\"stylesheet\" href=\"%s\">", stylesheet);
    sb_printf(b, "</head><body>\n"
                 "<header><nav aria-label=\"site\"><a class=\"brand\" href=\"/\">shardlab</a> "
                 "<a href=\"/#lessons\">Lessons</a> <a href=\"/#lexicon\">Lexicon</a> <a href=\"/#labs\">Labs</a> "
                 "<a href=\"/#runs\">Runs</a> <a href=\"/plan\">Planner</a></nav></header>\n<main %s>\n", main_attrs ? main_attrs : "");
}

void web_page_end(StrBuf *b, ...) {
    sb_printf(b, "</main>\n");
    va_list ap;
    va_start(ap, b);
    for (const char *script; (script = va_arg(ap, const char *)) != NULL;)
        sb_printf(b, "<script src=\"%s\"></script>\n", script);
    va_end(ap);
    sb_printf(b, "</body></html>\n");
}

// The token in the URL the server printed: remembered in a cookie only this site sends.
int web_send_page(Web *w, struct mg_connection *c, StrBuf *b) {
    char cookie[160] = "";
    const struct mg_request_info *ri = mg_get_request_info(c);
    char v[128];
    if (ri->query_string && mg_get_var(ri->query_string, strlen(ri->query_string), "token", v, sizeof v) > 0 &&
        web_token_eq(v, w->token))
        snprintf(cookie, sizeof cookie, "Set-Cookie: shardlab_token=%s; Path=/; HttpOnly; SameSite=Strict\r\n", w->token);
    web_reply(c, 200, "text/html; charset=utf-8", b->data, b->len, cookie);
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
                   *end = gt ? strstr(gt, close) : NULL, *next = gt ? strstr(gt, open) : NULL;
        // Not one md4c wrote (raw HTML in the text), or one whose close belongs to a later link
        // (an unclosed one in mangled text): shown as text.
        if (!end || !q || (next && next < end)) {
            sb_printf(b, "&lt;");
            p = at + 1;
            continue;
        }
        char target[128];
        snprintf(target, sizeof target, "%.*s", (int)(q - t), t);
        const char *name = lexicon_link_name(target, strlen(target), &web_lexicon);
        int is_term = lexicon_term(&web_lexicon, target) != NULL;
        if (name && web_safe_name(target)) {
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

// A file's bytes, whole (markdown, a script, a font: binary is fine, *n counts the bytes), or
// NULL, also for one over 64 MiB rather than a cut one; free() it.
static char *read_file_whole(const char *path, size_t *n) {
    StrBuf b;
    sb_init(&b);
    int rc = sb_read_file(&b, path, (size_t)64 << 20);
    if (rc != 0) {
        sb_free(&b);
        return NULL;
    }
    *n = b.len;
    return b.data;
}

// One Run button to lab's form, its fields filled from query ("" or "?stage=3&amp;..."),
// labelled "Run <text>"; the first opens the "Run it" box (*any counts them).
static void run_button(StrBuf *b, int *any, const char *lab, const StrBuf *query, const char *text) {
    if (!(*any)++) sb_printf(b, "<aside class=\"labs\"><h2>Run it</h2><ul>");
    sb_printf(b, "<li><a class=\"button\" href=\"/labs/%s%s\">Run ", lab, query->len ? query->data : "");
    sb_markup_text(b, text);
    sb_printf(b, "</a></li>");
}

// A term's Labs line: `lab` or `lab --option value --flag`, each a button to the lab's form
// with those options filled in (/labs/zero?stage=3; lab.js reads them). Only a lab the
// catalog has, and options it gives that lab, make a button.
static void lab_buttons(StrBuf *b, const char *labs) {
    int any = 0;
    for (const char *p = strchr(labs, '`'); p; p = strchr(p + 1, '`')) {
        const char *q = strchr(p + 1, '`');
        if (!q) break;
        char text[128], shown[128], *save = NULL;
        snprintf(text, sizeof text, "%.*s", (int)(q - p - 1), p + 1);
        snprintf(shown, sizeof shown, "%s", text);
        p = q;
        StrBuf query;
        sb_init(&query);
        char *name = strtok_r(text, " ", &save);
        const CatLab *lab = name ? catalog_lab(name) : NULL;
        int ok = lab != NULL;
        for (char *w = strtok_r(NULL, " ", &save); ok && w; w = strtok_r(NULL, " ", &save)) {
            const CatOption *o = strncmp(w, "--", 2) == 0 ? catalog_find(lab, w + 2) : NULL;  // (shared ones too)
            char *value = o && o->kind != OPT_FLAG ? strtok_r(NULL, " ", &save) : NULL;
            ok = o && (o->kind == OPT_FLAG || (value && web_safe_name(value)));
            if (ok) sb_printf(&query, "%s%s=%s", query.len ? "&amp;" : "?", o->name, value ? value : "1");
        }
        if (ok) run_button(b, &any, lab->name, &query, shown);
        sb_free(&query);
    }
    if (any) sb_printf(b, "</ul></aside>\n");
}

// A lesson's Run buttons: each lab its `make lab-NAME VAR=value ...` commands run, once, with
// the first such command's ranks, steps and lab options filled in (/labs/ddp?n=2&steps=30).
static void lesson_buttons(StrBuf *b, const char *md) {
    static const char *const vars[][2] = {{"NGPU", "n"},         {"STEPS", "steps"},       {"STAGE", "stage"},
                                          {"SCHEDULE", "schedule"}, {"MICRO", "micro"},     {"POLICY", "policy"},
                                          {"STRATEGY", "strategy"}};
    char seen[16][32];
    int nseen = 0, any = 0;
    for (const char *p = md; (p = strstr(p, "make lab-")) && nseen < 16; p++) {
        const char *name = p + strlen("make lab-");
        size_t len = strspn(name, "abcdefghijklmnopqrstuvwxyz");
        char lab[32];
        snprintf(lab, sizeof lab, "%.*s", (int)len, name);
        int dup = 0;
        for (int i = 0; i < nseen; i++) dup |= !strcmp(seen[i], lab);
        if (dup || !catalog_lab(lab)) continue;
        snprintf(seen[nseen++], sizeof seen[0], "%s", lab);
        StrBuf query;
        sb_init(&query);
        const char *q = name + len, *end = q + strcspn(q, "`\n");
        while (q < end) {  // VAR=value words, up to the command's end
            q += strspn(q, " ");
            size_t wl = strcspn(q, " `\n");
            char word[64], *eq;
            snprintf(word, sizeof word, "%.*s", (int)(wl < sizeof word ? wl : sizeof word - 1), q);
            q += wl ? wl : 1;
            if (!(eq = strchr(word, '='))) continue;
            *eq = 0;
            for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
                if (!strcmp(word, vars[v][0]) && web_safe_name(eq + 1))
                    sb_printf(&query, "%s%s=%s", query.len ? "&amp;" : "?", vars[v][1], eq + 1);
        }
        run_button(b, &any, lab, &query, lab);
        sb_free(&query);
    }
    if (any) sb_printf(b, "</ul></aside>\n");
}

int web_page_markdown(Web *w, struct mg_connection *c, const char *kind, const char *slug) {
    if (!web_safe_name(slug)) return web_not_found(c);
    const LexTerm *term = strcmp(kind, "lexicon") == 0 ? lexicon_term(&web_lexicon, slug) : NULL;
    const char *title = NULL;
    if (term) title = term->title;
    for (int i = 0; !title && strcmp(kind, "lessons") == 0 && i < web_lexicon.nlessons; i++)
        if (strcmp(web_lexicon.lessons[i].slug, slug) == 0) title = web_lexicon.lessons[i].title;
    if (!title) return web_not_found(c);
    char path[8400];
    snprintf(path, sizeof path, "%s/%s/%s.md", w->root, kind, slug);
    size_t n;
    char *md = read_file_whole(path, &n);
    if (!md) return web_not_found(c);
    // A page with a ```formula block draws it as mathematics: KaTeX (Debian's libjs-katex) and
    // web/static/math.js, which turns each `name = expression` line into TeX for it.
    int math = strstr(md, "```formula") != NULL;
    StrBuf b;
    sb_init(&b);
    web_page_start(w, c, &b, title, NULL, math ? "/static/katex/katex.min.css" : NULL);
    sb_printf(&b, "<article class=\"md\">\n");
    render_md(&b, md, n);
    sb_printf(&b, "</article>\n");
    if (term) lab_buttons(&b, term->labs);
    else lesson_buttons(&b, md);
    if (math) web_page_end(&b, "/static/katex/katex.min.js", "/static/math.js", NULL);
    else web_page_end(&b, NULL);
    int st = web_send_page(w, c, &b);
    sb_free(&b);
    free(md);
    return st;
}

int web_page_home(Web *w, struct mg_connection *c) {
    StrBuf b;
    sb_init(&b);
    web_page_start(w, c, &b, "Distributed training from scratch", "id=\"home\"", NULL);
    sb_printf(&b, "<h1>shardlab</h1><p>Distributed training from scratch: read a lesson, run its lab, watch it live.</p>\n");
    sb_printf(&b, "<section id=\"lessons\"><h2>Lessons</h2><ul class=\"lessons\">");  // (titles carry their numbers)
    for (int i = 0; i < web_lexicon.nlessons; i++) {
        sb_printf(&b, "<li><a href=\"/lessons/%s\">", web_lexicon.lessons[i].slug);
        sb_markup_text(&b, web_lexicon.lessons[i].title);
        sb_printf(&b, "</a></li>");
    }
    sb_printf(&b, "</ul></section>\n<section id=\"lexicon\"><h2>Lexicon</h2>"
                  "<label for=\"lexicon-search\">Search the lexicon</label> "
                  "<input id=\"lexicon-search\" type=\"search\" placeholder=\"all-reduce, zero 3, bubble...\" autocomplete=\"off\">");
    for (int cat = 0; cat < LEXICON_NCATEGORIES; cat++) {
        sb_printf(&b, "<div class=\"category\"><h3>%s</h3><ul>", LEXICON_CATEGORIES[cat]);
        for (int i = 0; i < web_lexicon.n; i++) {
            const LexTerm *t = &web_lexicon.t[i];
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
    web_page_end(&b, "/static/home.js", NULL);
    int st = web_send_page(w, c, &b);
    sb_free(&b);
    return st;
}

// One option of the catalog as a form field: its bounds and names are what POST /api/runs checks.
// An option's field. Left empty it is the option's default, which it shows (dflt: the
// catalog's, or the lab's own --layers).
static void field_input(StrBuf *b, const CatOption *f, const char *dflt) {
    char shown[96] = "";
    if (dflt && *dflt) snprintf(shown, sizeof shown, "%s", dflt);
    sb_printf(b, "<p><label for=\"f-%s\">--%s</label> ", f->name, f->name);
    if (f->flags & CAT_RUN) {  // lab.js offers the finished runs (GET /api/runs)
        sb_printf(b, "<select id=\"f-%s\" name=\"%s\" data-runs><option value=\"\">(none)</option></select>", f->name, f->name);
    } else if (f->kind == OPT_FLAG) {
        sb_printf(b, "<input type=\"checkbox\" id=\"f-%s\" name=\"%s\">", f->name, f->name);
    } else if (f->kind == OPT_STRING && f->choices) {
        sb_printf(b, "<select id=\"f-%s\" name=\"%s\"><option value=\"\">", f->name, f->name);
        if (shown[0]) sb_markup_text(b, shown), sb_printf(b, " (default)</option>");
        else sb_printf(b, "(default)</option>");
        for (const char *p = f->choices; *p;) {
            size_t k = strcspn(p, "|");
            sb_printf(b, "<option>%.*s</option>", (int)k, p);
            p += k + (p[k] != 0);
        }
        sb_printf(b, "</select>");
    } else if (f->kind == OPT_STRING || f->kind == OPT_BYTES) {
        sb_printf(b, "<input id=\"f-%s\" name=\"%s\" maxlength=\"64\" placeholder=\"", f->name, f->name);
        sb_markup_text(b, shown);
        sb_printf(b, "\">");
    } else {
        // A number's field: its default in the placeholder ("auto" for one derived from the
        // others); the browser's number field takes "auto" as a hint, not a value.
        if (f->kind == OPT_U64)
            sb_printf(b, "<input type=\"number\" id=\"f-%s\" name=\"%s\" min=\"0\" step=\"1\"", f->name, f->name);
        else
            sb_printf(b, "<input type=\"number\" id=\"f-%s\" name=\"%s\" min=\"%g\" max=\"%g\" step=\"%s\"", f->name,
                      f->name, f->min, f->max, f->kind == OPT_INT ? "1" : "any");
        sb_printf(b, " placeholder=\"");
        sb_markup_text(b, shown);
        sb_printf(b, "\">");
    }
    sb_printf(b, " <small>");
    sb_markup_text(b, f->help);
    sb_printf(b, "</small></p>");
}

int web_page_lab(Web *w, struct mg_connection *c, const char *name) {
    const CatLab *lab = web_safe_name(name) ? catalog_lab(name) : NULL;
    if (!lab) return web_not_found(c);
    StrBuf b;
    sb_init(&b);
    char attrs[96];
    snprintf(attrs, sizeof attrs, "id=\"lab\" data-lab=\"%s\"", lab->name);
    web_page_start(w, c, &b, lab->name, attrs, NULL);
    sb_printf(&b, "<h1>Lab: %s</h1><p>%s. Runs as <code>shardlab run %s -n N</code>.</p>\n", lab->name, lab->title, lab->name);
    sb_printf(&b, "<form id=\"lab-form\"><fieldset><legend>Run</legend>"
                  "<p><label for=\"f-n\">ranks (N)</label> <input type=\"number\" id=\"f-n\" name=\"n\" min=\"1\" max=\"%d\" value=\"%d\"></p>"
                  "<p><label for=\"f-steps\">steps</label> <input type=\"number\" id=\"f-steps\" name=\"steps\" min=\"1\" max=\"100000\" value=\"100\"></p>",
              lab->max_world ? lab->max_world : 8, lab->max_world == 1 ? 1 : 2);
    int folded = 0;
    for (int i = 0; i < lab->noptions; i++) {
        folded |= (lab->options[i].flags & CAT_FOLD) != 0;
        if ((lab->options[i].flags & CAT_FORM) && !(lab->options[i].flags & CAT_FOLD))
            field_input(&b, &lab->options[i], lab->options[i].dflt);
    }
    for (int i = 0; lab->trains && i < catalog_ntrain; i++)
        if (catalog_train[i].flags & CAT_RUN) field_input(&b, &catalog_train[i], catalog_train[i].dflt);
    sb_printf(&b, "</fieldset><details><summary>Model and data</summary>");
    if (lab->trains) {
        // The shape of the run (POST /api/runs also takes the other options the catalog marks).
        static const char *const shape[] = {"layers", "dim", "batch", "accum", "attn", "mixed"};
        for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++) {
            // pp's micro-batches are its gradient accumulation (--micro, above): no --accum.
            if (!strcmp(shape[k], "accum") && !strcmp(lab->name, "pp")) continue;
            const CatOption *f = catalog_find(lab, shape[k]);
            field_input(&b, f, !strcmp(shape[k], "layers") && lab->layers ? lab->layers : f->dflt);
        }
    }
    sb_printf(&b, "</details>");
    if (folded) {  // the options most runs leave alone (single's --moe and its shape)
        sb_printf(&b, "<details class=\"experts\"><summary>Experts (mixture of experts)</summary>");
        for (int i = 0; i < lab->noptions; i++)
            if ((lab->options[i].flags & CAT_FORM) && (lab->options[i].flags & CAT_FOLD))
                field_input(&b, &lab->options[i], lab->options[i].dflt);
        sb_printf(&b, "</details>");
    }
    sb_printf(&b, "<p><button type=\"submit\">Start the run</button></p><p id=\"lab-status\" aria-live=\"polite\"></p>"
                  "</form>\n");
    web_checks_section(w, &b, lab->name);  // (with --checks only)
    if (w->checks[0]) web_page_end(&b, "/static/lab.js", "/static/post.js", "/static/checks.js", NULL);
    else web_page_end(&b, "/static/lab.js", NULL);
    int st = web_send_page(w, c, &b);
    sb_free(&b);
    return st;
}

int web_page_run(Web *w, struct mg_connection *c, const char *id) {
    if (!web_safe_name(id) || !runs_exists(w, id)) return web_not_found(c);
    StrBuf b;
    sb_init(&b);
    char attrs[400];
    snprintf(attrs, sizeof attrs, "id=\"run\" data-run=\"%s\"", id);
    web_page_start(w, c, &b, id, attrs, NULL);
    sb_printf(&b, "<div id=\"dashboard\"><p>Loading run %s…</p></div>\n", id);
    // Outside the dashboard (run.js redraws that): the timeline as a file for Perfetto, once
    // the run has one (meta.json: GET .../trace answers 409 before). Until then it is hidden;
    // run.js shows it when the run's start event comes, never for a run that did not start.
    char dir[4400], meta[4450];
    struct stat meta_st;
    int started = run_exists(w, id, dir, sizeof dir) &&
                  (snprintf(meta, sizeof meta, "%s/meta.json", dir), stat(meta, &meta_st) == 0 && S_ISREG(meta_st.st_mode));
    sb_printf(&b, "<p class=\"run-trace\"%s><a href=\"/api/runs/", started ? "" : " hidden");
    sb_markup_text(&b, id);
    sb_printf(&b, "/trace\" download>Download the timeline (Perfetto)</a> <small>every rank's compute and "
                  "communication spans, memory and loss, for ui.perfetto.dev or chrome://tracing "
                  "(<code>shardlab trace</code>)</small></p>\n");
    web_page_end(&b, "/static/vendor/chart.min.js", "/static/run.js", NULL);
    int st = web_send_page(w, c, &b);
    sb_free(&b);
    return st;
}

// ---------------------------------------------------------------------------------------
// Static files: web/static/, Debian's Chart.js and Debian's KaTeX, nothing else

// What follows /static/ names a directory by its first words (the first prefix that matches),
// else it is in web/static. Debian's KaTeX keeps its fonts in /usr/share/fonts/truetype/katex
// and links them into its directory as katex/fonts: that link is a directory of its own here,
// so the guard below holds each file to the directory it was asked from.
static const struct {
    const char *prefix, *dir;
} static_dirs[] = {
    {"vendor/", DEBIAN_CHARTJS},
    {"katex/fonts/", DEBIAN_KATEX "/fonts"},
    {"katex/", DEBIAN_KATEX},
};

static const char *mime(const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot) return "application/octet-stream";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    if (!strcmp(dot, ".png")) return "image/png";
    if (!strcmp(dot, ".json")) return "application/json";
    if (!strcmp(dot, ".woff2")) return "font/woff2";  // KaTeX's fonts, sent byte for byte
    if (!strcmp(dot, ".woff")) return "font/woff";
    if (!strcmp(dot, ".ttf")) return "font/ttf";
    return "application/octet-stream";
}

int web_send_static(Web *w, struct mg_connection *c, const char *rel) {
    // rel: what follows /static/; each segment a safe name, no "..".
    char copy[512];
    if (strlen(rel) >= sizeof copy) return web_not_found(c);
    snprintf(copy, sizeof copy, "%s", rel);
    for (char *s = NULL, *seg = strtok_r(copy, "/", &s); seg; seg = strtok_r(NULL, "/", &s))
        if (!web_safe_name(seg)) return web_not_found(c);
    char base[4200], path[4800], real[PATH_MAX], real_base[PATH_MAX];
    snprintf(base, sizeof base, "%s/web/static", w->root);
    snprintf(path, sizeof path, "%s/%s", base, rel);
    for (size_t i = 0; i < sizeof static_dirs / sizeof static_dirs[0]; i++) {
        size_t k = strlen(static_dirs[i].prefix);
        if (strncmp(rel, static_dirs[i].prefix, k) != 0) continue;
        snprintf(base, sizeof base, "%s", static_dirs[i].dir);
        snprintf(path, sizeof path, "%s/%s", base, rel + k);
        break;
    }
    // A symbolic link that leads out of the directory is not ours to serve.
    if (!realpath(path, real) || !realpath(base, real_base) || strncmp(real, real_base, strlen(real_base)) != 0 ||
        real[strlen(real_base)] != '/')
        return web_not_found(c);
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) return web_not_found(c);
    size_t n;
    char *data = read_file_whole(real, &n);
    if (!data) return web_not_found(c);
    web_reply(c, 200, mime(real), data, n, NULL);
    free(data);
    return 200;
}
