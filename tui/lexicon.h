// lexicon.h — `shardlab lexicon` and `shardlab lesson`: the lexicon and the lessons (course.h)
// read in the terminal.
//
// Defines: lexicon_main(), lesson_main().
#ifndef SHARDLAB_LEXICON_H
#define SHARDLAB_LEXICON_H

// `shardlab lexicon [--plain] [TERM]`: the index grouped by category, or one term rendered
// for the terminal (mdterm.h), from root/lexicon. An unknown TERM: exit 2 with the closest terms.
int lexicon_main(int argc, char **argv, const char *root);
// `shardlab lesson [--plain] [LESSON]`: the lessons in order, or one lesson (by number, slug or
// title) rendered for the terminal, from root/lessons. An unknown LESSON: exit 2 with the closest.
int lesson_main(int argc, char **argv, const char *root);

#endif
