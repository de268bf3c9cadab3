// test.h — the tiny harness every C test uses.
//
// Defines: EXPECT(cond, fmt, ...), EXPECT_NEAR(a, b, tol, what), test_done().
//
// Each EXPECT prints "ok - <what>" or "not ok - <what> (file:line)"; tests/run.sh counts
// those lines across every test program and prints "N passed, N failed". A program that
// crashes or exits non-zero without a "not ok" line is counted as one failure too.
#ifndef SHARDLAB_TEST_H
#define SHARDLAB_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static int test_passed, test_failed;

__attribute__((format(printf, 4, 5))) static int test_expect(int ok, const char *file, int line,
                                                             const char *fmt, ...) {
    va_list ap;
    printf(ok ? "ok - " : "not ok - ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok) printf("  (%s:%d)", file, line);
    printf("\n");
    fflush(stdout);
    if (ok) test_passed++;
    else test_failed++;
    return ok;
}

#define EXPECT(cond, ...) test_expect(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

// |a - b| <= tol, printing both values.
#define EXPECT_NEAR(a, b, tol, what)                                                        \
    test_expect(fabs((double)(a) - (double)(b)) <= (tol), __FILE__, __LINE__,               \
                "%s: %.9g vs %.9g (|diff| %.3g <= %.3g)", (what), (double)(a), (double)(b), \
                fabs((double)(a) - (double)(b)), (double)(tol))

static int test_done(void) {
    printf("# %d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
