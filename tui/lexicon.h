// lexicon.h — `shardlab lexicon`: the lexicon (course.h) read in the terminal.
//
// Defines: lexicon_main().
#ifndef SHARDLAB_LEXICON_H
#define SHARDLAB_LEXICON_H

// `shardlab lexicon [--plain] [TERM]`: the index grouped by category, or one term rendered
// for the terminal (mdterm.h), from root/lexicon. An unknown TERM: exit 2 with the closest terms.
int lexicon_main(int argc, char **argv, const char *root);

#endif
