// suggest.c — see suggest.h.
#include "suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

// The optimal string alignment distance (Damerau-Levenshtein without re-editing a swapped
// pair): d[i][j] is the edits from a's first i letters to b's first j.
int suggest_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 80 || m > 80) return 99;
    int d[81][81];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int x = tolower((unsigned char)a[i - 1]), y = tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + (x != y);                      // change (or keep)
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;         // delete
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;         // insert
            if (i > 1 && j > 1 && x == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == y &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;                             // swap two neighbours
            d[i][j] = best;
        }
    return d[n][m];
}

int suggest_nearest(const char *word, const char *const names[], int n, const char *out[], int max) {
    size_t len = strlen(word);
    int tolerance = len / 4 > 1 ? (int)(len / 4) : 1, best = -1, k = 0;
    for (int i = 0; i < n; i++) {
        int e = suggest_distance(word, names[i]);
        // A name the word begins ("--bucket" for --bucket-mb) is as near as one edit.
        if (len >= 3 && e > 1 && strncasecmp(names[i], word, len) == 0) e = 1;
        if (e == 0 || e > tolerance) continue;  // (equal: no typo; the caller knows the name)
        // Equally many edits: the names of the word's length first ("dpp": ddp, not pp).
        int dl = (int)strlen(names[i]) - (int)len, score = 100 * e + (dl < 0 ? -dl : dl);
        if (best >= 0 && score > best) continue;
        if (best < 0 || score < best) best = score, k = 0;
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= strcmp(out[j], names[i]) == 0;
        if (!seen && k < max) out[k++] = names[i];
    }
    return k;
}

char *suggest_join(const char *const names[], int k, const char *prefix, const char *suffix, char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < k && len < n; i++) {
        const char *sep = i == 0 ? "" : i == k - 1 ? " or " : ", ";
        int w = snprintf(out + len, n - len, "%s'%s%s%s'", sep, prefix, names[i], suffix);
        if (w < 0) break;
        len += (size_t)w;
    }
    return out;
}
