// breaks.c — see breaks.h: linked into every broken lab, which says what is broken in it.
#include "breaks.h"

#include "common/runfiles/runlog.h"

void __wrap_lab_start(Lab *L, uint64_t params, const char *lab_fields) {
    __real_lab_start(L, params, lab_fields);
    runlog_printf(&L->log, "deliberately broken (tests/breaks/%s.c): %s\n", L->name, BREAK_WHAT);
}
