// test_design.c — labs/DESIGN.md, the project's design, held to the code that cites it.
//
// Usage: test_design ROOT   (tests/run.sh passes the checkout)
//
// What it proves:
//   1. Citations. Every mention of the design document in labs/, web/, tui/, tests/, the
//      Makefile and the documents (the top level's *.md, lessons/, lexicon/) names it as
//      labs/DESIGN.md. A citation that names a section ("labs/DESIGN.md, The run directory":
//      a comma, then a capital) names a heading of the document. A citation in a comment may
//      wrap: the next line's comment leader (//, #, *) is read through.
//   2. The schema. Every event kind and field that labs/command/runs/runschema.c checks (its table,
//      runschema_parts) is in the document. In "Events", each kind has an example object
//      {"ev":"<kind>",...} holding the kind's fields at its top level; the step event's "ms",
//      "bytes" and "mem" objects hold theirs. In "The run directory", the examples of
//      meta.json and summary.json hold theirs.
//   3. The variables. Every SHARDLAB_* variable the code names (a string literal in labs/,
//      web/, tui/) and every variable the launcher sets for its ranks (labs/command/shardlab.c's
//      setenv calls) is in "Environment".
//   4. The way to the code. Every lesson has a "## Read the code" section, between Exercises
//      and Terms, whose entries "- `labs/<file>:<function>`: ..." name a file that is there and
//      a function (or macro, or struct) it defines. Every lab's top comment points to the
//      files and functions of the algorithms it runs ("labs/03-collectives/ring.c, ring_all_reduce()"),
//      and each one is defined where named. The path of a call drawn at the top of
//      labs/common/comm/dist.h names on each row functions that its row's file defines.
//   5. The layout. labs/ holds a folder per lab, numbered by its lesson, each with one
//      program; common/ and command/ beside them; no lab or common/ file includes command/.
// The matchers are proven first on crafted text (check_matchers): a scanner that finds
// nothing would pass whatever the document says.
// Broken on purpose: with "grad_norm" taken out of the step event's example in labs/DESIGN.md,
// part 2 fails naming step's grad_norm; with labs/common/model/gpt.h citing "DESIGN.md, The model",
// part 1 fails naming gpt.h's line; with lesson 05 naming ddp.c's sync_gradient, part 4 fails
// naming the lesson and the function.
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "command/runs/runschema.h"
#include "common/runfiles/json.h"
#include "test.h"

static char root[4096];

// The whole file at ROOT/rel into sb (NUL-terminated); 0, or -1 if it cannot be read.
static int read_rel(StrBuf *sb, const char *rel) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    sb_reset(sb);
    return sb_read_file(sb, path, (size_t)64 << 20) < 0 ? -1 : 0;
}

static int is_word_char(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

// ---------------------------------------------------------------------------------------
// The document: its headings and their sections
// ---------------------------------------------------------------------------------------

#define MAX_HEADINGS 64
typedef struct {
    const char *text;             // the whole document
    char name[MAX_HEADINGS][96];  // "The run directory"
    const char *body[MAX_HEADINGS], *end[MAX_HEADINGS];  // the section under each heading
    int n;
} Doc;

// The "## " and "### " headings of text, each section running to the next heading.
static void doc_parse(Doc *d, const char *text) {
    d->text = text, d->n = 0;
    for (const char *line = text; *line; ) {
        const char *eol = strchr(line, '\n');
        if (!eol) eol = line + strlen(line);
        int level = 0;
        while (line[level] == '#') level++;
        if ((level == 2 || level == 3) && line[level] == ' ' && d->n < MAX_HEADINGS) {
            if (d->n) d->end[d->n - 1] = line;
            snprintf(d->name[d->n], sizeof d->name[0], "%.*s", (int)(eol - line - level - 1), line + level + 1);
            d->body[d->n] = *eol ? eol + 1 : eol;
            d->n++;
        }
        line = *eol ? eol + 1 : eol;
    }
    if (d->n) d->end[d->n - 1] = text + strlen(text);
}

// The section under heading `name` as a NUL-terminated copy into sb; 0, or -1 if none.
static int doc_section(const Doc *d, const char *name, StrBuf *sb) {
    sb_reset(sb);
    sb_append(sb, "", 0);
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->name[i], name)) return sb_append(sb, d->body[i], (size_t)(d->end[i] - d->body[i])), 0;
    return -1;
}

// ---------------------------------------------------------------------------------------
// 1. Citations
// ---------------------------------------------------------------------------------------

typedef struct {
    int citations;  // labs/DESIGN.md, named right
    int sections;   // of them, naming a section that is a heading
    int bad;        // wrong: another name for the document, or a section it lacks
    StrBuf why;     // a line for each wrong one
} Cites;

// The text from p on, as a reader of the comment reads it: a line's end, the next line's
// indentation and its comment leader (//, #, *) are one space. At most n - 1 characters.
static void read_through(const char *p, char *out, size_t n) {
    size_t k = 0;
    while (*p && k + 1 < n) {
        if (*p == '\n' || *p == ' ' || *p == '\t') {
            int newline = 0;
            while (*p == '\n' || *p == ' ' || *p == '\t') newline |= *p++ == '\n';
            if (newline) {
                if (p[0] == '/' && p[1] == '/') p += 2;
                else if (*p == '#' || (*p == '*' && p[1] != '/')) p++;
                while (*p == ' ' || *p == '\t') p++;
            }
            out[k++] = ' ';
            continue;
        }
        out[k++] = *p++;
    }
    out[k] = 0;
}

// The longest heading that s starts with as whole words, or NULL.
static const char *heading_at(const Doc *d, const char *s) {
    const char *best = NULL;
    for (int i = 0; i < d->n; i++) {
        size_t l = strlen(d->name[i]);
        if (!strncmp(s, d->name[i], l) && !is_word_char(s[l]) && (!best || l > strlen(best))) best = d->name[i];
    }
    return best;
}

// Every mention of the document in text (the file `path`): the name it goes by must be
// labs/DESIGN.md, and a section it names must be a heading of d.
static void check_citations(const char *path, const char *text, const Doc *d, Cites *c) {
    static const char word[] = "DESIGN", full[] = "labs/DESIGN.md";
    for (const char *p = text; (p = strstr(p, word)); p += sizeof word - 1) {
        if ((p > text && is_word_char(p[-1])) || is_word_char(p[sizeof word - 1])) continue;  // part of a name
        int line = 1;
        for (const char *q = text; q < p; q++) line += *q == '\n';
        const char *start = p - 5;
        if (p - text < 5 || strncmp(start, full, sizeof full - 1) != 0) {
            char as[48];
            read_through(p - (p - text < 8 ? p - text : 8), as, sizeof as);
            sb_printf(&c->why, "# %s:%d: names the design as '%s...', not labs/DESIGN.md\n", path, line, as);
            c->bad++;
            continue;
        }
        c->citations++;
        const char *after = start + sizeof full - 1;
        if (after[0] != ',' || after[1] != ' ' || !(after[2] >= 'A' && after[2] <= 'Z')) continue;  // no section
        char named[160];
        read_through(after + 2, named, sizeof named);
        if (heading_at(d, named)) {
            c->sections++;
        } else {
            sb_printf(&c->why, "# %s:%d: labs/DESIGN.md has no section '%.60s...'\n", path, line, named);
            c->bad++;
        }
    }
}

// Whether a file's text is to be read: not binary (no NUL byte).
static int is_text(const StrBuf *sb) { return memchr(sb->data, 0, sb->len) == NULL; }

// Calls visit(rel, arg) for every regular file under ROOT/rel (a folder: recursively; build
// outputs, node_modules, caches and dot-files left out), or for ROOT/rel itself.
static void walk_tree(const char *rel, void (*visit)(const char *rel, void *arg), void *arg) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(path);
        for (struct dirent *e; dir && (e = readdir(dir));) {
            const char *n = e->d_name;
            if (n[0] == '.' || !strcmp(n, "node_modules") || !strcmp(n, "__pycache__") || !strcmp(n, "build")) continue;
            char sub[4400];
            snprintf(sub, sizeof sub, "%s/%s", rel, n);
            walk_tree(sub, visit, arg);
        }
        if (dir) closedir(dir);
    } else if (S_ISREG(st.st_mode)) {
        visit(rel, arg);
    }
}

typedef struct {
    const char *ext;  // only names ending in it, when given
    const Doc *d;
    Cites *c;
    int *files;
} CiteScan;

static void scan_file(const char *rel, void *arg) {
    const CiteScan *s = arg;
    size_t l = strlen(rel);
    if (s->ext && (l < strlen(s->ext) || strcmp(rel + l - strlen(s->ext), s->ext) != 0)) return;
    if (!strcmp(rel, "tests/test_design.c")) return;  // this file: its needles name the word
    StrBuf sb;
    sb_init(&sb);
    if (read_rel(&sb, rel) == 0 && is_text(&sb)) {
        check_citations(rel, sb.data, s->d, s->c);
        (*s->files)++;
    }
    sb_free(&sb);
}

// Every file under ROOT/rel, or ROOT/rel itself; only names ending in ext when ext is given.
static void scan_tree(const char *rel, const char *ext, const Doc *d, Cites *c, int *files) {
    CiteScan s = {ext, d, c, files};
    walk_tree(rel, scan_file, &s);
}

static void check_all_citations(const Doc *d) {
    Cites c = {0};
    sb_init(&c.why);
    int files = 0;
    const char *trees[] = {"labs", "web", "tui", "tests", "Makefile", "lessons", "lexicon"};
    for (size_t i = 0; i < sizeof trees / sizeof *trees; i++) scan_tree(trees[i], NULL, d, &c, &files);
    DIR *top = opendir(root);  // the top level's documents
    for (struct dirent *e; top && (e = readdir(top));) {
        size_t l = strlen(e->d_name);
        if (l > 3 && !strcmp(e->d_name + l - 3, ".md")) scan_tree(e->d_name, NULL, d, &c, &files);
    }
    if (top) closedir(top);
    if (c.why.len) fputs(c.why.data, stdout);
    // Proves: the project names its design one way, and only by sections it has.
    EXPECT(c.bad == 0, "every citation of the design in %d files is labs/DESIGN.md, and each section named is a heading "
           "(%d citations, %d naming a section; %d wrong)", files, c.citations, c.sections, c.bad);

    // Proves: the scan reaches the files that cite it: the model's header names its section.
    Cites one = {0};
    sb_init(&one.why);
    StrBuf gpt;
    sb_init(&gpt);
    int read = read_rel(&gpt, "labs/common/model/gpt.h") == 0;
    if (read) check_citations("labs/common/model/gpt.h", gpt.data, d, &one);
    EXPECT(read && one.citations >= 1 && one.sections == one.citations && one.bad == 0,
           "labs/common/model/gpt.h cites labs/DESIGN.md, The model (%d citations, %d sections)", one.citations, one.sections);
    EXPECT(c.citations >= 20 && c.sections >= 20, "the tree cites the design by section: %d citations, %d sections (>= 20)",
           c.citations, c.sections);
    sb_free(&gpt);
    sb_free(&one.why);
    sb_free(&c.why);
}

// ---------------------------------------------------------------------------------------
// 2. The schema
// ---------------------------------------------------------------------------------------

// Past the JSON-like value that starts at p ({...}, [...], "..." or a bare word), or NULL if
// it does not end. Strings are skipped whole, so braces inside them do not count.
static const char *value_end(const char *p) {
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1]) p++;
        return *p ? p + 1 : NULL;
    }
    if (*p != '{' && *p != '[') {
        while (*p && !strchr(",}]\n", *p)) p++;
        return p;
    }
    int depth = 0;
    for (; *p; p++) {
        if (*p == '"') {
            const char *e = value_end(p);
            if (!e) return NULL;
            p = e - 1;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if ((*p == '}' || *p == ']') && --depth == 0) {
            return p + 1;
        }
    }
    return NULL;
}

// The value of key `name` at the top level of the object at obj ('{'), or NULL: a key of
// an object inside it does not count.
static const char *top_key(const char *obj, const char *name) {
    const char *end = value_end(obj);
    if (*obj != '{' || !end) return NULL;
    size_t n = strlen(name);
    for (const char *p = obj + 1; p < end - 1;) {
        while (p < end - 1 && strchr(" \t\n,", *p)) p++;
        if (*p != '"') {  // a placeholder such as ... in {...}: skip to the next member
            while (p < end - 1 && *p != ',') p++;
            continue;
        }
        const char *key_end = value_end(p);
        if (!key_end || key_end > end) return NULL;
        const char *v = key_end;
        while (*v == ' ' || *v == '\n') v++;
        if (*v != ':') {
            p = key_end;
            continue;
        }
        for (v++; *v == ' ' || *v == '\n'; v++) {}
        if ((size_t)(key_end - p) == n + 2 && !strncmp(p + 1, name, n)) return v;
        const char *after = value_end(v);
        if (!after) return NULL;
        p = after;
    }
    return NULL;
}

// The example object of a part of the schema in the document, or NULL: an event kind's
// {"ev":"<kind>",...} in events; in run_dir, a file's entry: its name at the start of a line,
// then the first object of the entry, which runs on over the indented lines below it.
static const char *example_of(const char *part, const char *events, const char *run_dir) {
    if (strstr(part, ".json")) {
        size_t n = strlen(part);
        for (const char *p = run_dir; (p = strstr(p, part)); p++) {
            if ((p > run_dir && p[-1] != '\n') || is_word_char(p[n]) || p[n] == '.') continue;
            for (const char *q = p + n; *q; q++) {
                if (*q == '{') return q;
                if (*q == '\n' && q[1] != ' ') break;  // the next entry
            }
        }
        return NULL;
    }
    char head[96];
    snprintf(head, sizeof head, "{\"ev\":\"%s\"", part);
    return strstr(events, head);
}

// The fields of part missing from the document's example of it: one line each into why.
// Returns how many (a part without an example counts its every field).
static int missing_fields(const RunSchemaPart *part, const char *events, const char *run_dir, StrBuf *why) {
    char kind[64];
    snprintf(kind, sizeof kind, "%s", part->part);
    char *dot = strstr(kind, ".json") ? NULL : strchr(kind, '.');
    if (dot) *dot = 0;  // "step.ms": the "ms" object of the step event
    const char *obj = example_of(kind, events, run_dir);
    if (obj && dot) {
        obj = top_key(obj, dot + 1);
        if (obj && *obj != '{') obj = NULL;
    }
    if (!obj) {
        sb_printf(why, "# labs/DESIGN.md: no example of %s%s%s\n", kind, dot ? "'s " : "", dot ? dot + 1 : "");
        return part->nfields;
    }
    int missing = 0;
    for (int i = 0; i < part->nfields; i++)
        if (!top_key(obj, part->fields[i].name)) {
            sb_printf(why, "# labs/DESIGN.md: %s's example lacks \"%s\"\n", part->part, part->fields[i].name);
            missing++;
        }
    return missing;
}

static void check_schema(const Doc *d) {
    StrBuf events, run_dir, why;
    sb_init(&events), sb_init(&run_dir), sb_init(&why);
    int has_events = doc_section(d, "Events", &events) == 0, has_run_dir = doc_section(d, "The run directory", &run_dir) == 0;
    EXPECT(has_events && has_run_dir, "labs/DESIGN.md has the sections Events and The run directory");
    int fields = 0, missing = 0, kinds = 0;
    for (int i = 0; i < runschema_nparts; i++) {
        missing += missing_fields(&runschema_parts[i], events.data, run_dir.data, &why);
        fields += runschema_parts[i].nfields;
        kinds += !strchr(runschema_parts[i].part, '.');
    }
    if (why.len) fputs(why.data, stdout);
    // Proves: whatever the validator requires of a run, the design writes down, field by field.
    EXPECT(missing == 0, "every event kind and field runschema.c checks is in labs/DESIGN.md's examples (%d parts, "
           "%d event kinds, %d fields; %d missing)", runschema_nparts, kinds, fields, missing);
    // Proves: the table is the schema, not an empty list that any document would match.
    EXPECT(kinds == 6 && fields >= 50, "runschema.c's table has the 6 event kinds and %d fields", fields);
    sb_free(&events), sb_free(&run_dir), sb_free(&why);
}

// ---------------------------------------------------------------------------------------
// 3. The variables
// ---------------------------------------------------------------------------------------

#define MAX_VARS 128
typedef struct {
    char name[MAX_VARS][64];
    int n;
} Vars;

static void add_var(Vars *v, const char *s, size_t len) {
    if (len >= sizeof v->name[0] || v->n == MAX_VARS) return;
    for (int i = 0; i < v->n; i++)
        if (strlen(v->name[i]) == len && !strncmp(v->name[i], s, len)) return;
    memcpy(v->name[v->n], s, len);
    v->name[v->n++][len] = 0;
}

// Each string literal in text that is exactly "<prefix>NAME", NAME of capitals, digits and
// underscores (at least one): e.g. "SHARDLAB_TIMEOUT_S".
static void literals_after(const char *text, const char *prefix, Vars *v) {
    size_t lp = strlen(prefix);
    for (const char *p = text; (p = strstr(p, prefix)); p += lp) {
        const char *name = prefix[0] == '"' ? p + 1 : p + lp, *e = p + lp;
        while ((*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9') || *e == '_') e++;
        if (e > p + lp && *e == '"') add_var(v, name, (size_t)(e - name));
    }
}

static void source_file_vars(const char *rel, void *arg) {
    const char *ext = strrchr(rel, '.');
    if (!ext || (strcmp(ext, ".c") && strcmp(ext, ".h") && strcmp(ext, ".cu") && strcmp(ext, ".cuh"))) return;
    StrBuf sb;
    sb_init(&sb);
    if (read_rel(&sb, rel) == 0) literals_after(sb.data, "\"SHARDLAB_", arg);
    sb_free(&sb);
}

static void source_vars(const char *rel, Vars *v) { walk_tree(rel, source_file_vars, v); }

// Whether name is in text as a whole word (SHARDLAB_SHM is not in SHARDLAB_SHM_FD).
static int has_word(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)); p++)
        if ((p == text || !is_word_char(p[-1])) && !is_word_char(p[n])) return 1;
    return 0;
}

static void check_environment(const Doc *d) {
    Vars v = {0};
    source_vars("labs", &v), source_vars("web", &v), source_vars("tui", &v);
    StrBuf launcher, env;
    sb_init(&launcher), sb_init(&env);
    if (read_rel(&launcher, "labs/command/shardlab.c") == 0) {
        literals_after(launcher.data, "setenv(\"", &v);
        literals_after(launcher.data, "setenv_int(\"", &v);
    }
    int has_env = doc_section(d, "Environment", &env) == 0, absent = 0, timeout = 0, rank = 0;
    for (int i = 0; i < v.n; i++) {
        timeout |= !strcmp(v.name[i], "SHARDLAB_TIMEOUT_S"), rank |= !strcmp(v.name[i], "RANK");
        if (has_env && has_word(env.data, v.name[i])) continue;
        printf("# labs/DESIGN.md, Environment: no %s\n", v.name[i]);
        absent++;
    }
    // Proves: the scan finds the variables (a deadline the code reads, one the launcher sets).
    EXPECT(timeout && rank, "the code's variables include SHARDLAB_TIMEOUT_S (read) and RANK (set by the launcher): %d "
           "found", v.n);
    // Proves: a variable the code reads or sets is one a reader of the design can look up.
    EXPECT(has_env && absent == 0, "every one of the %d variables is in labs/DESIGN.md, Environment (%d absent)", v.n, absent);
    sb_free(&launcher), sb_free(&env);
}

// ---------------------------------------------------------------------------------------
// 4. The way to the code: lessons and labs name functions that exist
// ---------------------------------------------------------------------------------------

// Whether src defines name: a function (a line starting at column 0 that declares name(...),
// its parameters closed, then '{'), a macro (#define name), a struct (struct name {) or a
// typedef'd struct (} name;). A call, a prototype, a comment or a parameter is no definition.
static int defines(const char *src, const char *name) {
    size_t nl = strlen(name);
    for (const char *line = src; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *eol = strchr(line, '\n');
        if (!eol) eol = line + strlen(line);
        if (!strncmp(line, "#define ", 8) && !strncmp(line + 8, name, nl) && !is_word_char(line[8 + nl])) return 1;
        if (line[0] == '}' && line[1] == ' ' && !strncmp(line + 2, name, nl) && line[2 + nl] == ';') return 1;
        if (!((line[0] >= 'a' && line[0] <= 'z') || (line[0] >= 'A' && line[0] <= 'Z'))) continue;
        for (const char *p = line; p + nl <= eol; p++) {
            if (*p == '(' || *p == '=' || *p == ';') break;  // past the declarator: a call or an initialiser
            if (strncmp(p, name, nl) != 0 || (p > line && is_word_char(p[-1])) || is_word_char(p[nl])) continue;
            const char *q = p + nl;
            while (*q == ' ') q++;
            if (*q == '{') return !strncmp(line, "struct ", 7) || !strncmp(line, "typedef struct ", 15);
            if (*q != '(') break;
            int depth = 0;  // the parameters, across lines, then what follows them
            for (; *q; q++) {
                if (*q == '(') depth++;
                else if (*q == ')' && --depth == 0) break;
            }
            if (!*q) break;
            for (q++; *q == ' ' || *q == '\n' || *q == '\t'; q++) {}
            if (*q == '{') return 1;
            break;
        }
    }
    return 0;
}

static int is_path_char(char c) { return is_word_char(c) || c == '/' || c == '.' || c == '-'; }

// The pointers in text (a top comment): every name.c token (one starting labs/, or with base
// given, any, read under base), and the name() tokens after it on its line, up to the next
// file. The file must be there and define each name. Returns the wrong ones (each a line in
// why); *pointers counts the names.
static int check_pointers(const char *where, const char *text, size_t len, const char *base, int *pointers,
                          StrBuf *why) {
    int bad = 0;
    char file[512] = "";
    StrBuf src;
    sb_init(&src);
    int have_src = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n') {
            file[0] = 0;
            continue;
        }
        if (!is_word_char(text[i]) || (i > 0 && is_path_char(text[i - 1]))) continue;
        size_t j = i;
        while (j < len && (is_word_char(text[j]) || text[j] == '/' || text[j] == '-')) j++;
        if (j + 1 < len && text[j] == '.' && text[j + 1] == 'c' && (j + 2 >= len || !is_path_char(text[j + 2]) ||
                                                                   text[j + 2] == '.')) {
            int labs = !strncmp(text + i, "labs/", 5);
            if (labs || base) {
                snprintf(file, sizeof file, "%s%.*s.c", labs ? "" : base, (int)(j - i), text + i);
                have_src = read_rel(&src, file) == 0;
                if (!have_src) bad++, sb_printf(why, "# %s: %s is not a file\n", where, file);
            } else {
                file[0] = 0;
            }
            i = j + 1;
            continue;
        }
        if (file[0] && j + 1 < len && text[j] == '(' && text[j + 1] == ')') {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(j - i), text + i);
            (*pointers)++;
            if (have_src && !defines(src.data, name))
                bad++, sb_printf(why, "# %s: %s() is not defined in %s\n", where, name, file);
        }
        i = j - 1;
    }
    sb_free(&src);
    return bad;
}

// The leading run of // lines of a source file.
static size_t top_comment(const char *src) {
    const char *p = src;
    while (!strncmp(p, "//", 2)) {
        const char *nl = strchr(p, '\n');
        if (!nl) return strlen(src);
        p = nl + 1;
    }
    return (size_t)(p - src);
}

// A lesson's "## Read the code": between Exercises and Terms, every item "- `labs/<path>:<name>`:
// what to look for", the file there and defining name. Returns the entries; *bad the wrong ones.
static int read_the_code(const char *where, const char *md, int *bad, StrBuf *why) {
    const char *sec = strstr(md, "\n## Read the code\n"), *ex = strstr(md, "\n## Exercises\n"),
               *terms = strstr(md, "\n## Terms\n");
    if (!sec || !ex || !terms || sec < ex || sec > terms) {
        (*bad)++, sb_printf(why, "# %s: no \"## Read the code\" between Exercises and Terms\n", where);
        return 0;
    }
    const char *end = strstr(sec + 1, "\n## ");
    int entries = 0;
    StrBuf src;
    sb_init(&src);
    for (const char *line = sec + 1; line && line < end; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, "- ", 2) != 0) continue;
        const char *a = line + 2, *colon = NULL, *close = NULL;
        if (*a == '`') close = strchr(a + 1, '`');
        if (close) colon = memchr(a, ':', (size_t)(close - a));
        char file[512] = "", name[128] = "";
        if (colon && !strncmp(a + 1, "labs/", 5)) {
            snprintf(file, sizeof file, "%.*s", (int)(colon - a - 1), a + 1);
            snprintf(name, sizeof name, "%.*s", (int)(close - colon - 1), colon + 1);
        }
        int named = file[0] && name[0] && !strstr(file, "..") && close[1] == ':' && close[2] == ' ' && close[3] &&
                    close[3] != '\n';
        for (const char *c = name; named && *c; c++) named = is_word_char(*c);
        if (!named) {
            (*bad)++, sb_printf(why, "# %s: \"%.*s\" is not \"- `labs/<file>:<function>`: what to look for\"\n", where,
                                (int)(strcspn(line, "\n") > 60 ? 60 : strcspn(line, "\n")), line);
            continue;
        }
        entries++;
        if (read_rel(&src, file) != 0) (*bad)++, sb_printf(why, "# %s: %s is not a file\n", where, file);
        else if (!defines(src.data, name)) (*bad)++, sb_printf(why, "# %s: %s is not defined in %s\n", where, name, file);
    }
    sb_free(&src);
    if (!entries) (*bad)++, sb_printf(why, "# %s: \"## Read the code\" lists no function\n", where);
    return entries;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void check_read_the_code(void) {
    StrBuf why, text;
    sb_init(&why), sb_init(&text);
    // The lessons: lessons/NN-*.md.
    char *names[64];
    int n = 0;
    char path[8192];
    snprintf(path, sizeof path, "%s/lessons", root);
    DIR *dir = opendir(path);
    for (struct dirent *e; dir && (e = readdir(dir)) && n < 64;) {
        const char *s = e->d_name;
        size_t l = strlen(s);
        if (s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9' && s[2] == '-' && l > 3 && !strcmp(s + l - 3, ".md"))
            names[n++] = strdup(s);
    }
    if (dir) closedir(dir);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    int entries = 0, bad = 0, fewest = 1 << 30;
    for (int i = 0; i < n; i++) {
        char rel[600];
        snprintf(rel, sizeof rel, "lessons/%s", names[i]);
        int k = read_rel(&text, rel) == 0 ? read_the_code(rel, text.data, &bad, &why) : 0;
        printf("# %s: %d functions to read\n", rel, k);
        entries += k, fewest = k < fewest ? k : fewest;
        free(names[i]);
    }
    if (why.len) fputs(why.data, stdout);
    // Proves: every lesson says which functions to read, and each names a file that is there
    // and a function defined in it. Broken variant: lesson 05 naming sync_gradient for ddp.c's
    // sync_gradients fails here, naming the lesson and the function.
    EXPECT(n == 19 && bad == 0 && fewest >= 1, "each of the %d lessons has \"## Read the code\", between Exercises and "
           "Terms, and its %d entries name functions defined in files that exist (%d wrong)", n, entries, bad);

    // The labs' top comments: each names the files and functions of the algorithms it runs.
    static const char *LABS[] = {"01-single/single", "03-collectives/collectives", "05-ddp/ddp", "08-zero/zero",
                                 "09-fsdp/fsdp", "10-tp/tp", "12-pp/pp", "14-activation-checkpointing/ckpt",
                                 "04-data-sharding/shard", "18-cp/cp", "19-ep/ep"};
    int lab_bad = 0, without = 0, pointers = 0;
    sb_reset(&why);
    for (size_t i = 0; i < sizeof LABS / sizeof *LABS; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "labs/%s.c", LABS[i]);
        int here = 0;
        if (read_rel(&text, rel) == 0) lab_bad += check_pointers(rel, text.data, top_comment(text.data), NULL, &here, &why);
        else lab_bad++, sb_printf(&why, "# %s is not a file\n", rel);
        if (!here) without++, sb_printf(&why, "# %s: its top comment names no labs/<file>.c, function()\n", rel);
        pointers += here;
    }
    if (why.len) fputs(why.data, stdout);
    // Proves: a lab's reader finds each algorithm's file and function from the lab's top
    // comment, and every one named is there. Broken variant: ddp.c's top comment naming
    // ring_allreduce() in labs/03-collectives/ring.c fails here.
    EXPECT(lab_bad == 0 && without == 0, "every lab's top comment names its algorithms' files and functions: %d "
           "functions, all defined where named (%d wrong, %d labs naming none)", pointers, lab_bad, without);

    // The path from the API to the ring, drawn at the top of dist.h: its file names are
    // paths from labs/, and each function on a row is defined in that row's file.
    int path_names = 0, path_bad = 0;
    sb_reset(&why);
    if (read_rel(&text, "labs/common/comm/dist.h") == 0)
        path_bad = check_pointers("labs/common/comm/dist.h", text.data, top_comment(text.data), "labs/", &path_names, &why);
    else path_bad = 1;
    if (why.len) fputs(why.data, stdout);
    // Proves: the drawing follows the code, hop by hop, from dist_all_reduce() to the ring.
    EXPECT(path_bad == 0 && path_names >= 12, "labs/common/comm/dist.h draws the path of a call: %d functions on its rows, "
           "each defined in its row's file (%d wrong)", path_names, path_bad);
    sb_free(&why), sb_free(&text);
}

// ---------------------------------------------------------------------------------------
// The matchers, on crafted text
// ---------------------------------------------------------------------------------------

static void check_matchers(void) {
    Doc d;
    const char *doc = "# t\n\n## Events\n\n```\n{\"ev\":\"end\",\"rank\":R,\"status\":\"ok\",\n \"x\":{\"steps\":S}}\n```\n"
                      "## The run directory\nmeta.json   {\"lab\":\"x\",\"config\":{...}}\n## Environment\nSHARDLAB_SHM_FD\n";
    doc_parse(&d, doc);
    // Proves: headings are read, and a section runs to the next heading.
    EXPECT(d.n == 3 && !strcmp(d.name[1], "The run directory") && strstr(d.body[0], "\"ev\":\"end\"") &&
           !strstr(d.body[1], "\"ev\""), "crafted document: 3 headings, each section to the next (%d)", d.n);

    Cites c = {0};
    sb_init(&c.why);
    const char *text = "// see labs/DESIGN.md, Events.\n// as DESIGN.md says\n// labs/DESIGN.md, The run\n"
                       "//   directory: files\n# labs/DESIGN.md, No such section\n * labs/DESIGN.md's own words\n"
                       "SHARDLAB_DESIGN_X and DESIGNS are other words\n";
    check_citations("crafted", text, &d, &c);
    // Proves: a bare DESIGN.md and a missing section are caught; a wrapped section name is
    // read through its comment leader; words that only contain the name are not citations.
    EXPECT(c.citations == 4 && c.sections == 2 && c.bad == 2 && strstr(c.why.data, "crafted:2:") &&
           strstr(c.why.data, "crafted:5:"), "crafted citations: 4 right, 2 sections, 2 wrong (lines 2 and 5): %d, %d, %d",
           c.citations, c.sections, c.bad);
    sb_free(&c.why);

    // Proves: a key counts only at the object's top level, and strings hide their braces.
    const char *obj = "{\"ev\":\"x{\",\"ms\":{\"rank\":1},\"a\":[{\"b\":2}],\"tail\":T}";
    EXPECT(top_key(obj, "rank") == NULL && top_key(obj, "b") == NULL && top_key(obj, "ms") && *top_key(obj, "ms") == '{' &&
           top_key(obj, "tail") && *top_key(obj, "tail") == 'T', "crafted object: top-level keys only");

    StrBuf events, run_dir, why;
    sb_init(&events), sb_init(&run_dir), sb_init(&why);
    doc_section(&d, "Events", &events), doc_section(&d, "The run directory", &run_dir);
    static const RunSchemaField end_fields[] = {{"rank", "u", 0}, {"status", "s", 0}, {"steps", "i", 0}};
    static const RunSchemaField meta_fields[] = {{"lab", "s", 0}, {"config", "o", 0}, {"argv", "a", 0}};
    static const RunSchemaField span_fields[] = {{"rank", "u", 0}};
    RunSchemaPart end = {"end", end_fields, 3}, meta = {"meta.json", meta_fields, 3}, span = {"span", span_fields, 1};
    // Proves: a field found only inside a nested object, or absent, is missing; a part without
    // an example misses every field.
    int m_end = missing_fields(&end, events.data, run_dir.data, &why);
    int m_meta = missing_fields(&meta, events.data, run_dir.data, &why);
    int m_span = missing_fields(&span, events.data, run_dir.data, &why);
    EXPECT(m_end == 1 && m_meta == 1 && m_span == 1, "crafted schema: end lacks steps, meta.json argv, span its example (%d %d %d)",
           m_end, m_meta, m_span);
    sb_free(&events), sb_free(&run_dir), sb_free(&why);

    // Proves: a definition is told from a comment, a prototype, a call, a parameter and a
    // function pointer; a signature may wrap; macros and structs count.
    const char *src = "// fake(x) in a comment\nstatic void proto(int a);\nvoid caller(void) {\n    callee(1);\n}\n"
                      "static const char *multi(int a,\n                         int (*f)(int)) {\n}\n"
                      "struct Be {\n    void (*run)(int);\n};\n#define MACRO_X 3\ntypedef struct {\n    int a;\n} Thing;\n"
                      "int y = init(2);\n";
    int defs = defines(src, "caller") + defines(src, "multi") + defines(src, "MACRO_X") + defines(src, "Thing") +
               defines(src, "Be");
    int not_defs = defines(src, "fake") + defines(src, "proto") + defines(src, "callee") + defines(src, "f") +
                   defines(src, "run") + defines(src, "init") + defines(src, "MACRO") + defines(src, "call");
    EXPECT(defs == 5 && not_defs == 0, "crafted source: 5 definitions found, 8 non-definitions refused (%d, %d)", defs,
           not_defs);
    // Proves: a pointer's names are read after its file, on its line; a missing function or
    // file is caught; a lab's binary (build/labs/ddp) and a file outside labs/ are no pointer.
    const char *top = "// the ring: labs/03-collectives/ring.c, ring_all_reduce(), nosuch()\n// build/labs/ddp --help, x()\n"
                      "// labs/common/none.c, y(); ring.c: z()\n";
    int named = 0;
    StrBuf pw;
    sb_init(&pw);
    int wrong = check_pointers("crafted", top, strlen(top), NULL, &named, &pw);
    EXPECT(named == 3 && wrong == 2 && strstr(pw.data, "nosuch() is not defined in labs/03-collectives/ring.c") &&
           strstr(pw.data, "labs/common/none.c is not a file"), "crafted top comment: 3 names, nosuch() and none.c "
           "caught (%d, %d)", named, wrong);
    sb_free(&pw);

    // Proves: a variable must be there as a whole word.
    EXPECT(!has_word("SHARDLAB_SHM_FD", "SHARDLAB_SHM") && has_word("x SHARDLAB_SHM, y", "SHARDLAB_SHM"),
           "crafted variables: SHARDLAB_SHM is not in SHARDLAB_SHM_FD");
}

// Does src define main()? (a line starting "int main(")
static int has_main(const char *src) {
    for (const char *p = src; (p = strstr(p, "int main(")); p++)
        if (p == src || p[-1] == '\n') return 1;
    return 0;
}

// What the layout's walk over a lab's folder or common/ counts: its C files, those that
// include a header under command/ ("#include \"command/..."), and the names in the files'
// "// defines:" notes (check_include_notes), with the wrong ones.
typedef struct {
    int files, notes, notes_bad;
    StrBuf *command_why, *notes_why;
} LayoutScan;

static int check_include_notes(const char *rel, int *bad, StrBuf *why);

static void layout_file(const char *rel, void *arg) {
    LayoutScan *s = arg;
    size_t l = strlen(rel);
    if (l < 2 || (strcmp(rel + l - 2, ".c") && strcmp(rel + l - 2, ".h"))) return;
    StrBuf src;
    sb_init(&src);
    s->files++;
    if (read_rel(&src, rel) == 0 && strstr(src.data, "#include \"command/"))
        sb_printf(s->command_why, "# %s includes the command's code (command/)\n", rel);
    sb_free(&src);
    if (strncmp(rel, "labs/common/", 12)) s->notes += check_include_notes(rel, &s->notes_bad, s->notes_why);
}

// Whether name occurs as a whole word in src, outside // comments.
static int has_code_word(const char *src, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = src; (p = strstr(p, name)); p += nl) {
        if ((p > src && is_word_char(p[-1])) || is_word_char(p[nl])) continue;
        const char *bol = p;
        while (bol > src && bol[-1] != '\n') bol--;
        const char *c = strstr(bol, "//");
        if (!c || c > p) return 1;
    }
    return 0;
}

// The "// defines: a(), B, ..." notes beside the includes of the file at rel (a lab's
// folder's): each name must be declared in the header the line includes (found beside rel,
// else under labs/). Returns the names checked; *bad and why the wrong ones.
static int check_include_notes(const char *rel, int *bad, StrBuf *why) {
    StrBuf src, hdr;
    sb_init(&src), sb_init(&hdr);
    int names = 0;
    if (read_rel(&src, rel) != 0) return 0;
    for (const char *line = src.data; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, "#include \"", 10)) continue;
        const char *q = strchr(line + 10, '"'), *eol = strchr(line, '\n'), *note = strstr(line, "// defines: ");
        if (!eol) eol = line + strlen(line);
        if (!q || !note || note > eol) continue;
        char inc[600], path[1400];
        snprintf(inc, sizeof inc, "%.*s", (int)(q - line - 10), line + 10);
        const char *slash = strrchr(rel, '/');
        snprintf(path, sizeof path, "%.*s/%s", (int)(slash - rel), rel, inc);
        if (read_rel(&hdr, path) != 0) {
            snprintf(path, sizeof path, "labs/%s", inc);
            if (read_rel(&hdr, path) != 0) {
                (*bad)++, sb_printf(why, "# %s: %s is not a header here\n", rel, inc);
                continue;
            }
        }
        for (const char *p = note + 12; p < eol;) {
            while (p < eol && !is_word_char(*p)) p++;
            const char *s = p;
            while (p < eol && is_word_char(*p)) p++;
            if (p == s) break;
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(p - s), s);
            names++;
            if (!has_code_word(hdr.data, name))
                (*bad)++, sb_printf(why, "# %s: the note beside %s names %s, which %s does not declare\n", rel, inc, name, path);
        }
    }
    sb_free(&src), sb_free(&hdr);
    return names;
}

// 5. The layout: labs/ holds one folder per lab, NN-name/ numbered by the lesson it goes
// with (lessons/NN-*.md), each with one program (one file defining main()); common/, what
// the labs share; command/, the shardlab command's code; and documents (*.md). No file of a
// lab or of common/ includes command/: the labs build without the command.
static void check_layout(void) {
    StrBuf why, src;
    sb_init(&why), sb_init(&src);
    char path[8192];
    snprintf(path, sizeof path, "%s/labs", root);
    DIR *dir = opendir(path);
    int labs = 0, bad = 0, common = 0, command = 0;
    char *lab_dirs[64];
    for (struct dirent *e; dir && (e = readdir(dir));) {
        const char *s = e->d_name;
        size_t l = strlen(s);
        if (s[0] == '.') continue;
        if (!strcmp(s, "common")) { common = 1; continue; }
        if (!strcmp(s, "command")) { command = 1; continue; }
        if (l > 3 && !strcmp(s + l - 3, ".md")) continue;
        int numbered = l > 3 && s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9' && s[2] == '-';
        if (!numbered || labs >= 64) {
            bad++, sb_printf(&why, "# labs/%s: neither a lab's folder (NN-name/), common/, command/ nor a document\n", s);
            continue;
        }
        lab_dirs[labs++] = strdup(s);
    }
    if (dir) closedir(dir);
    qsort(lab_dirs, (size_t)labs, sizeof *lab_dirs, cmp_names);
    // The lessons' names (NN-slug.md), read once.
    char *lessons[64];
    int nlessons = 0;
    snprintf(path, sizeof path, "%s/lessons", root);
    DIR *ld = opendir(path);
    for (struct dirent *e; ld && (e = readdir(ld)) && nlessons < 64;)
        if (strlen(e->d_name) > 6 && e->d_name[2] == '-') lessons[nlessons++] = strdup(e->d_name);
    if (ld) closedir(ld);
    for (int i = 0; i < labs; i++) {
        const char *s = lab_dirs[i];
        if (i > 0 && !strncmp(s, lab_dirs[i - 1], 2)) bad++, sb_printf(&why, "# labs/%s: its number is taken\n", s);
        // Its lesson.
        int lesson = 0;
        for (int k = 0; k < nlessons; k++) lesson |= !strncmp(lessons[k], s, 3);
        if (!lesson) bad++, sb_printf(&why, "# labs/%s: no lesson lessons/%.3s*.md\n", s, s);
        // Its one program.
        snprintf(path, sizeof path, "%s/labs/%s", root, s);
        DIR *fd = opendir(path);
        int mains = 0;
        for (struct dirent *e; fd && (e = readdir(fd));) {
            size_t l = strlen(e->d_name);
            char rel[4096];
            snprintf(rel, sizeof rel, "labs/%s/%s", s, e->d_name);
            if (l > 2 && !strcmp(e->d_name + l - 2, ".c") && read_rel(&src, rel) == 0 && has_main(src.data)) mains++;
        }
        if (fd) closedir(fd);
        if (mains != 1) bad++, sb_printf(&why, "# labs/%s: %d files define main(), not 1\n", s, mains);
    }
    if (why.len) fputs(why.data, stdout);
    // Proves: `ls labs` shows the course, lab by lab in the lessons' order, and the two folders.
    // Broken variant: a stray labs/zero/ (no number) fails here, naming it.
    EXPECT(labs >= 10 && bad == 0 && common && command, "labs/ holds %d labs' folders (NN-name/, each one program, "
           "numbered by its lesson), common/ and command/ (%d wrong)", labs, bad);
    for (int k = 0; k < nlessons; k++) free(lessons[k]);
    sb_reset(&why);
    StrBuf notes_why;
    sb_init(&notes_why);
    LayoutScan scan = {.command_why = &why, .notes_why = &notes_why};
    for (int i = 0; i < labs; i++) {
        char rel[600];
        snprintf(rel, sizeof rel, "labs/%s", lab_dirs[i]);
        walk_tree(rel, layout_file, &scan);
        free(lab_dirs[i]);
    }
    walk_tree("labs/common", layout_file, &scan);
    int files = scan.files, notes = scan.notes, notes_bad = scan.notes_bad;
    if (why.len) fputs(why.data, stdout);
    // Proves: a lab builds from its folder and common/ alone. Broken variant: ddp.c including
    // command/plan/planner.h fails here, naming ddp.c.
    EXPECT(files > 50 && why.len == 0, "none of the %d files of the labs and common/ includes command/", files);
    if (notes_why.len) fputs(notes_why.data, stdout);
    // Proves: the "// defines:" notes beside a lab's includes say what each header brings, and
    // stay true. Broken variant: ddp.c's note on dist.h naming dist_no_such() fails here.
    EXPECT(notes > 100 && notes_bad == 0, "the labs' include notes name %d things, each declared in the header "
           "beside it (%d wrong)", notes, notes_bad);
    sb_free(&notes_why);
    sb_free(&why), sb_free(&src);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_design ROOT\n");
        return 2;
    }
    snprintf(root, sizeof root, "%s", argv[1]);
    check_matchers();
    StrBuf text;
    sb_init(&text);
    int read = read_rel(&text, "labs/DESIGN.md") == 0;
    // Proves: the design is in the project, where everything cites it.
    EXPECT(read && text.len > 0, "labs/DESIGN.md is there");
    if (!read) return test_done();
    Doc d;
    doc_parse(&d, text.data);
    check_all_citations(&d);
    check_schema(&d);
    check_environment(&d);
    check_read_the_code();
    check_layout();
    sb_free(&text);
    return test_done();
}
