// catalog.h — every lab shardlab has and every option each one takes: names, types, bounds,
// defaults, help, whether the web's form offers it, the lexicon entry of each lab and the
// configurations the grader runs. Written once, in catalog.c.
//
// Who reads it: each lab's option parsing and --help (args.c's train_args_parse, and
// collectives.c), `shardlab run --help`, the web's forms and POST /api/runs, the grader (a
// run's config checked before a reference runs on it, and `make grade`'s configurations),
// and the dashboard's lexicon key. A bound, a default or a help text changes here and
// everywhere at once; no reader keeps its own copy.
#ifndef SHARDLAB_CATALOG_H
#define SHARDLAB_CATALOG_H

#include <stddef.h>
#include <stdint.h>

// The values "auto" stands for in the shared options (args.c derives them from these; the help
// texts say them): --warmup's steps, --lr-min's divisor of --lr, and when --replay-every keeps
// replay points (runs of at least that many steps whose state fits that many MiB).
#define CATALOG_WARMUP_AUTO 100
#define CATALOG_LR_MIN_DIVISOR 10
#define CATALOG_REPLAY_MIN_STEPS 50
#define CATALOG_REPLAY_MAX_MIB 16
// --seq reaches long contexts (128K tokens, as Llama 3's longest, for context parallelism's
// plans); a step's tokens, --batch x --seq, stay under 2^28, so that a Linear's rows (B T) fit
// an int, and naive attention's B NH T^2 scores a size_t at every width and depth.
#define CATALOG_MAX_SEQ (1 << 17)
#define CATALOG_MAX_BATCH_TOKENS (1 << 28)

// What an option's value is, and the C type a lab binds it to: INT int, DOUBLE double, U64
// uint64_t, BYTES uint64_t (written "4096", "64K", "16M", "1G": powers of 1024), STRING
// const char *, FLAG int (no value: present sets it to 1).
typedef enum { OPT_INT, OPT_DOUBLE, OPT_U64, OPT_BYTES, OPT_STRING, OPT_FLAG } OptKind;

enum {
    CAT_FORM = 1,  // the web's form offers it, and POST /api/runs takes it
    CAT_RUN = 2,   // (with CAT_FORM) names a finished run: the web offers its own runs
    CAT_FILE = 4,  // a readable regular file, or the default's text ("synthetic")
    CAT_FOLD = 8,  // (with CAT_FORM) the form shows it folded, under "Experts": an option most runs leave alone
};

typedef struct {
    const char *name;     // without the leading "--"
    OptKind kind;
    double min, max;      // INT, DOUBLE, BYTES: the values allowed, inclusive
    const char *choices;  // STRING: the names it takes, "a|b|c" (NULL: text the lab checks)
    const char *dflt;     // the default as text; "auto": derived after parsing (a number's
                          // value is then -1); NULL: none (a string NULL, a flag off)
    const char *metavar;  // e.g. "N", "PATH" (flags: "")
    const char *help;
    unsigned flags;       // CAT_*
    const char *chars;    // CAT_FORM text without choices: the characters it may hold
} CatOption;

typedef struct {
    const char *name;      // build/labs/<name>
    const char *title;     // a few words: the web's lab page, `shardlab run --help`
    const char *about;     // the lab's --help, above its options
    const char *lexicon;   // lexicon/<slug>.md: the dashboard's key and the lab page's link
    int trains;            // takes the options every training lab shares (catalog_train)
    int max_world;         // most ranks it runs on (single: 1), else 0: any N
    const char *layers;    // its default --layers when not the shared one: a number, or "auto"
    const CatOption *options;  // its own
    int noptions;
} CatLab;

// One run of `shardlab grade --labs DIR`: small and quick, each chosen so that its checks bite.
typedef struct {
    const char *label, *lab;
    int n;
    const char *args[12];
    const char *config;  // what its meta.json's config says that decides the rubric, for a run
                         // that stopped before writing one (JSON; NULL: nothing)
} CatGraded;

extern const CatLab catalog_labs[];
extern const int catalog_nlabs;
extern const CatOption catalog_train[];  // the options every training lab shares
extern const int catalog_ntrain;
extern const CatGraded catalog_graded[];
extern const int catalog_ngraded;

// The lab called name, or NULL.
const CatLab *catalog_lab(const char *name);
// The option --name of lab: its own, or for a training lab one every lab shares; NULL if none.
// lab NULL: the options every training lab shares, only.
const CatOption *catalog_find(const CatLab *lab, const char *name);

// Whether text is a value o takes: its type, bounds, choices, and for CAT_FILE a readable
// regular file. 0, or -1 with the reason in why, naming --o->name, in the words the labs'
// parser prints. Text for a STRING that starts with '-' is refused when from_outside (it
// would read as an option: the grader and the web pass values on to a lab's command line).
int catalog_check(const CatOption *o, const char *text, int from_outside, char *why, size_t n);
// The same for the option --name of the lab called lab, or with lab NULL one every training lab
// shares ("no such option" if there is none).
int catalog_check_option(const char *lab, const char *name, const char *text, char *why, size_t n);
// Stores o's default into value (the type of its kind).
void catalog_default(const CatOption *o, void *value);
// The text of --name among a lab's options opts[0..nopts) (argv-style: "--name value" or
// "--name=value"): the value, "" for a flag, NULL when absent; the last one given counts, as
// the labs' parser takes it.
const char *catalog_value_in(int nopts, char *const opts[], const char *name);
// "4096", "64K", "16M", "1G" as bytes; -1 if text is not a size.
int catalog_bytes(const char *text, uint64_t *out);

// An option bound to where its value goes; given: set when the command line had it.
typedef struct {
    const CatOption *opt;
    void *value;
    int given;
} CatSlot;

// A lab's own option bound to the variable its value goes into.
typedef struct {
    const char *name;  // without the leading "--"
    void *value;       // of the type its OptKind names
} LabBind;

// The slots of lab's own options, each bound in binds to its variable and set to its default:
// every option the catalog gives the lab must be bound, once, and nothing else (else a bug in
// shardlab: it dies saying which). Returns n.
int catalog_bind(const CatLab *lab, const LabBind *binds, int n, CatSlot *slots);

// Parses argv[1..argc) into the slots (each already holding its default): `--name value`,
// `--name=value`, flags alone. --help prints about, then the slots' options with their
// current values as defaults (headed by `heading` for the first `nfirst` of them, then "<prog>
// options"), and exits 0; anything wrong is one line from usage_error() and exit 2 (an
// unknown option names the nearest of the slots', as did you mean: suggest.h).
void catalog_parse(const char *prog, const char *about, CatSlot *slots, int nslots, int nfirst, const char *heading,
                   int argc, char **argv);

#endif
