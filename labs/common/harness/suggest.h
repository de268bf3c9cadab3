// suggest.h — "did you mean": how far apart two words are, and which names of a list a
// mistyped word was most likely meant to be. One helper for every reader of names: the
// launcher's labs, the labs' options (catalog.c), the lexicon's terms (labs/command/course/).
//
#ifndef SHARDLAB_SUGGEST_H
#define SHARDLAB_SUGGEST_H

#include <stddef.h>

#define SUGGEST_MAX 3  // names a did-you-mean offers at most

// The edits from a to b: a letter inserted, deleted or changed, or two neighbours swapped
// ("stpes" is one edit from "steps"), in any case. Words longer than 80 bytes are 99 apart.
int suggest_distance(const char *a, const char *b);

// The names of names[0..n) nearest to word, if near enough to be a typo of it: within one
// edit in four letters (at least one), or a name that word begins (three letters or more).
// Equally near ones (as many edits, and as many letters more or fewer than word) in list
// order, at most max of them into out; returns how many (0: none).
int suggest_nearest(const char *word, const char *const names[], int n, const char *out[], int max);

// "'a'", "'a' or 'b'", "'a', 'b' or 'c'" for names[0..k), each between prefix and suffix
// ("--" and "": "'--steps'"), into out. Returns out.
char *suggest_join(const char *const names[], int k, const char *prefix, const char *suffix, char *out, size_t n);

#endif
