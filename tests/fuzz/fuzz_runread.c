// fuzz_runread.c — libFuzzer target: the run-log reader and the dashboard (see runread_target.h).
//
//   make fuzz                      # FUZZ_SECONDS=60 by default; the corpus is build/fuzz/corpus
//   build/fuzz/fuzz_runread CRASH  # replay one input
#include <stdlib.h>
#include <unistd.h>

#include "runread_target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char scratch[64];
    if (!scratch[0]) {
        snprintf(scratch, sizeof scratch, "/tmp/shardlab-fuzz-XXXXXX");
        if (!mkdtemp(scratch)) abort();
    }
    fuzz_runread_one(data, n, scratch);
    return 0;
}
