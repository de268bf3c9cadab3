// regions.h — the student's TODO regions, in the order of the lessons, and what each is worth.
//
// Defines: TodoRegion, TODO_REGIONS, TODO_NREGIONS, TodoConfig, TODO_CONFIGS, TODO_NCONFIGS,
//          todo_region_named(), todo_region_runs_in(), todo_region_points().
//
// One row per /* BEGIN SOLUTION: what */ region of labs/ (tests/test_todo.c keeps the rows and
// the files in step): the name `make check TODO=<name>` takes, the check program that holds its
// check, the file and the marker's words, where to reread, and the graded configurations that
// run it (`shardlab grade`'s labels, whose points are TODO_CONFIGS').
#ifndef SHARDLAB_TODO_REGIONS_H
#define SHARDLAB_TODO_REGIONS_H

typedef struct {
    const char *name;     // "ring-reduce-scatter"
    const char *program;  // the check program: check_<program>
    const char *file;     // under labs/
    const char *what;     // the words of its BEGIN SOLUTION marker
    const char *reread;   // the lesson and lexicon terms that explain it
    const char *graded;   // the graded configurations that run it, comma-separated
} TodoRegion;

typedef struct {
    const char *label;    // a graded configuration ("ddp-accum")
    int points;           // what shardlab grade's rubric gives it at most
} TodoConfig;

extern const TodoRegion TODO_REGIONS[];
extern const int TODO_NREGIONS;
extern const TodoConfig TODO_CONFIGS[];
extern const int TODO_NCONFIGS;

// The row of `name`, or NULL.
const TodoRegion *todo_region_named(const char *name);
// Whether the graded configuration `label` runs the region (r->graded names it).
int todo_region_runs_in(const TodoRegion *r, const char *label);
// The points of the graded configurations that run the region (the sum of their maxima).
int todo_region_points(const TodoRegion *r);

#endif
