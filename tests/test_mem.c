// test_mem.c — the counting allocator (labs/common/harness/mem.c).
//
// What it proves: the "mem" numbers of the run log are what was allocated. Each category
// counts exactly the bytes asked for and nothing else; the peak is the high-water mark of
// the total, so a transient buffer freed before anyone looks still shows in it;
// mem_reset_peak starts a new mark from what is held now; every buffer is 64-byte aligned
// (cache lines, vector loads) and zero-filled (gradients and optimizer state start at 0);
// buffers can be freed in any order; and freeing a pointer the allocator did not hand out
// (another Mem's, an interior pointer, a double free, a stack address) stops the program
// with a message instead of corrupting the counts. Those deaths run in a forked child whose
// exit status and stderr we check. Under ASan, a leak in mem_destroy would fail this test too.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/harness/mem.h"
#include "test.h"

static int aligned64(const void *p) { return ((uintptr_t)p & 63) == 0; }

static int all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

static void test_categories(void) {
    Mem m;
    mem_init(&m, NULL);
    EXPECT(mem_total(&m) == 0 && mem_peak(&m) == 0, "a new Mem holds nothing and has peak 0");
    // All but the activations stay allocated until mem_destroy.
    mem_alloc(&m, MEM_PARAMS, 1000, "weights");
    mem_alloc(&m, MEM_GRADS, 1000, "gradients");
    mem_alloc_floats(&m, MEM_OPTIM, 500, "moments");
    void *a = mem_alloc(&m, MEM_ACTS, 77, "activations");
    mem_alloc(&m, MEM_COMM, 3, "bucket");
    // The bytes asked for, not the 64-byte rounding the allocator uses underneath: the graded
    // formulas (4 Psi, 8 Psi, ...) are in exact bytes.
    EXPECT(mem_in_use(&m, MEM_PARAMS) == 1000, "params counts the 1000 bytes asked for");
    EXPECT(mem_in_use(&m, MEM_GRADS) == 1000, "grads counts its 1000 bytes, separately from params");
    EXPECT(mem_in_use(&m, MEM_OPTIM) == 2000, "mem_alloc_floats(500) counts 500 * 4 = 2000 bytes");
    EXPECT(mem_in_use(&m, MEM_ACTS) == 77, "acts counts 77 bytes (not rounded up to 128)");
    EXPECT(mem_in_use(&m, MEM_COMM) == 3, "comm counts 3 bytes (not rounded up to 64)");
    EXPECT(mem_total(&m) == 1000 + 1000 + 2000 + 77 + 3, "mem_total is the sum of the categories (4080)");
    EXPECT(mem_in_use(&m, MEM_CATEGORIES) == 0 && mem_in_use(&m, (MemCategory)-1) == 0,
           "an out-of-range category reads as 0 bytes");
    EXPECT(strcmp(mem_category_name(MEM_PARAMS), "params") == 0 && strcmp(mem_category_name(MEM_GRADS), "grads") == 0 &&
               strcmp(mem_category_name(MEM_OPTIM), "optim") == 0 && strcmp(mem_category_name(MEM_ACTS), "acts") == 0 &&
               strcmp(mem_category_name(MEM_COMM), "comm") == 0,
           "category names are the keys of the step event's mem object");
    mem_free(&m, a);
    EXPECT(mem_in_use(&m, MEM_ACTS) == 0 && mem_in_use(&m, MEM_PARAMS) == 1000,
           "freeing the activations empties acts and leaves the other categories alone");
    mem_free(&m, NULL);
    EXPECT(mem_total(&m) == 4003, "mem_free(NULL) is a no-op");
    mem_destroy(&m);  // frees the other four: ASan's leak check would report them otherwise
    EXPECT(mem_total(&m) == 0 && mem_peak(&m) == 0, "mem_destroy frees everything and leaves an empty Mem");
}

static void test_peak(void) {
    Mem m;
    mem_init(&m, NULL);
    void *w = mem_alloc(&m, MEM_PARAMS, 1000, "weights");
    EXPECT(mem_peak(&m) == 1000, "peak follows the total while it only grows (1000)");
    // A transient workspace, as gpt_forward allocates and frees within one pass.
    void *scratch = mem_alloc(&m, MEM_ACTS, 5000, "workspace");
    mem_free(&m, scratch);
    EXPECT(mem_total(&m) == 1000, "after the transient is freed the total is back to 1000");
    EXPECT(mem_peak(&m) == 6000, "but the peak remembers the transient: 1000 + 5000 = 6000");
    void *small = mem_alloc(&m, MEM_ACTS, 2000, "smaller transient");
    EXPECT(mem_peak(&m) == 6000, "a later, smaller high point (3000) does not lower the peak");
    mem_free(&m, small);
    mem_reset_peak(&m);
    EXPECT(mem_peak(&m) == 1000, "mem_reset_peak restarts the mark from what is held now (1000)");
    void *t1 = mem_alloc(&m, MEM_COMM, 300, "bucket 1");
    void *t2 = mem_alloc(&m, MEM_COMM, 400, "bucket 2");
    mem_free(&m, t1);
    mem_free(&m, t2);
    EXPECT(mem_peak(&m) == 1700, "after the reset the peak counts two overlapping transients: 1000 + 300 + 400");
    mem_free(&m, w);
    EXPECT(mem_total(&m) == 0 && mem_peak(&m) == 1700, "freeing everything never lowers the peak");
    mem_destroy(&m);
}

static void test_alignment_and_zero(void) {
    Mem m;
    mem_init(&m, NULL);
    // Dirty the heap first so that zero-filled memory is the allocator's doing, not luck.
    for (int i = 0; i < 8; i++) {
        unsigned char *d = mem_alloc(&m, MEM_ACTS, 4096, "dirty");
        memset(d, 0xAB, 4096);
        mem_free(&m, d);
    }
    size_t sizes[] = {0, 1, 3, 63, 64, 65, 100, 4096, 4097, 1 << 20};
    int aligned = 1, zero = 1, distinct = 1;
    void *ptrs[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        ptrs[i] = mem_alloc(&m, MEM_GRADS, sizes[i], "sized");
        aligned &= ptrs[i] != NULL && aligned64(ptrs[i]);
        zero &= all_zero(ptrs[i], sizes[i]);
        for (size_t j = 0; j < i; j++) distinct &= ptrs[j] != ptrs[i];
        memset(ptrs[i], 0x5A, sizes[i]);  // every byte asked for is writable (ASan checks)
    }
    EXPECT(aligned, "every buffer (0 bytes to 1 MiB, odd sizes too) is non-NULL and 64-byte aligned");
    EXPECT(zero, "every buffer comes zero-filled, even over freed, dirtied memory");
    EXPECT(distinct, "a zero-byte allocation is a distinct live pointer like any other");
    EXPECT(mem_in_use(&m, MEM_GRADS) == 0 + 1 + 3 + 63 + 64 + 65 + 100 + 4096 + 4097 + (1 << 20),
           "the zero-byte buffer counts 0 bytes, the others exactly their size");
    mem_free(&m, ptrs[0]);
    EXPECT(mem_in_use(&m, MEM_GRADS) == 1 + 3 + 63 + 64 + 65 + 100 + 4096 + 4097 + (1 << 20),
           "a zero-byte buffer can be freed");
    mem_destroy(&m);
}

static void test_free_any_order(void) {
    Mem m;
    mem_init(&m, NULL);
    // More buffers than the table's first capacity (64), so it grows while buffers live.
    enum { N = 100 };
    void *p[N];
    size_t expect = 0;
    for (int i = 0; i < N; i++) {
        p[i] = mem_alloc(&m, (MemCategory)(i % MEM_CATEGORIES), (size_t)(i + 1) * 8, "buffer");
        expect += (size_t)(i + 1) * 8;
    }
    EXPECT(mem_total(&m) == expect && mem_peak(&m) == expect, "100 live buffers are all counted (%zu bytes)", expect);
    // Free in a scrambled order (i * 37 mod 100 visits every i once: 37 is coprime to 100),
    // checking the per-category count after each free.
    size_t left[MEM_CATEGORIES] = {0};
    for (int i = 0; i < N; i++) left[i % MEM_CATEGORIES] += (size_t)(i + 1) * 8;
    int counts_ok = 1;
    for (int k = 0; k < N; k++) {
        int i = (k * 37) % N;
        mem_free(&m, p[i]);
        left[i % MEM_CATEGORIES] -= (size_t)(i + 1) * 8;
        for (int c = 0; c < MEM_CATEGORIES; c++) counts_ok &= mem_in_use(&m, (MemCategory)c) == left[c];
    }
    EXPECT(counts_ok, "freeing in scrambled order keeps every category's count exact after each free");
    EXPECT(mem_total(&m) == 0 && mem_peak(&m) == expect, "all freed: total 0, peak still %zu", expect);
    // The table still works after all that shuffling.
    void *again = mem_alloc(&m, MEM_PARAMS, 10, "again");
    EXPECT(mem_total(&m) == 10, "the allocator is reusable after everything was freed");
    mem_free(&m, again);
    mem_destroy(&m);
}

// ---- what must stop the program ---------------------------------------------------------

typedef enum { FOREIGN_STACK, FOREIGN_OTHER_MEM, INTERIOR, DOUBLE_FREE } BadFree;

// In the child: do the bad free. If mem_free returns, the allocator accepted it: exit 0.
static void bad_free(BadFree kind) {
    Mem m, other;
    mem_init(&m, NULL);
    mem_init(&other, NULL);
    char *mine = mem_alloc(&m, MEM_PARAMS, 256, "mine");
    void *theirs = mem_alloc(&other, MEM_PARAMS, 256, "theirs");
    int on_stack;
    switch (kind) {
    case FOREIGN_STACK: mem_free(&m, &on_stack); break;
    case FOREIGN_OTHER_MEM: mem_free(&m, theirs); break;
    case INTERIOR: mem_free(&m, mine + 64); break;
    case DOUBLE_FREE:
        mem_free(&m, mine);
        mem_free(&m, mine);
        break;
    }
    _exit(0);
}

// Runs bad_free(kind) in a child with stderr captured in a pipe; expects it to exit
// non-zero with a message containing want.
static void expect_dies(BadFree kind, const char *want, const char *what) {
    int fd[2];
    if (pipe(fd) != 0) {
        EXPECT(0, "%s: pipe() failed", what);
        return;
    }
    fflush(stdout);  // the child must not print our buffered lines a second time
    pid_t pid = fork();
    if (pid < 0) {
        EXPECT(0, "%s: fork() failed", what);
        return;
    }
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], STDERR_FILENO);
        bad_free(kind);
    }
    close(fd[1]);
    char msg[4096];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof msg - 1 && (got = read(fd[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)got;
    msg[len] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int died = WIFEXITED(status) && WEXITSTATUS(status) != 0;
    msg[strcspn(msg, "\n")] = 0;  // the first line is the error; the HINT follows
    EXPECT(died && strstr(msg, want) != NULL, "%s: the program exits with status %d and says '%s'", what,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, msg);
}

static void test_bad_frees(void) {
    expect_dies(FOREIGN_STACK, "mem_free", "mem_free of a stack address dies");
    expect_dies(FOREIGN_OTHER_MEM, "mem_free", "mem_free of another Mem's buffer dies (it is not in this table)");
    expect_dies(INTERIOR, "mem_free", "mem_free of a pointer into the middle of a buffer dies");
    expect_dies(DOUBLE_FREE, "mem_free", "freeing the same buffer twice dies on the second free");
}

// What a GPU's Mem does (mem_keep_freed, set by mem_init on CUDA), here on the CPU: a freed
// buffer is handed out again to a request of the same size, zeroed, and counted as new;
// another size gets other memory; the counts and the peak are those without reuse; the
// kept buffers are released by mem_keep_freed(0) and mem_destroy (ASan reports a leak
// otherwise). Broken variant: reusing without zeroing fails the "zero-filled" check.
static void test_keep_freed(void) {
    Mem m;
    mem_init(&m, NULL);
    EXPECT(!m.keep_freed, "on the CPU freed buffers go back to the heap by default");
    mem_keep_freed(&m, 1);
    unsigned char *a = mem_alloc(&m, MEM_ACTS, 1000, "workspace");
    memset(a, 0xab, 1000);
    mem_free(&m, a);
    EXPECT(mem_in_use(&m, MEM_ACTS) == 0 && mem_peak(&m) == 1000, "a kept buffer counts nowhere once freed");
    unsigned char *b = mem_alloc(&m, MEM_ACTS, 1000, "workspace");
    EXPECT(b == a, "the next request of the same size gets the kept buffer back (no allocation)");
    EXPECT(all_zero(b, 1000), "a reused buffer is zero-filled, as new memory is");
    EXPECT(mem_in_use(&m, MEM_ACTS) == 1000 && mem_peak(&m) == 1000, "reused, it is counted again as new, and the "
           "peak is the same as without reuse");
    unsigned char *c = mem_alloc(&m, MEM_ACTS, 999, "other");
    EXPECT(c != a, "a request of another size gets other memory");
    mem_free(&m, b);
    mem_free(&m, c);
    EXPECT(m.nkept == 2 && mem_total(&m) == 0, "both freed buffers kept, nothing counted");
    mem_keep_freed(&m, 0);
    EXPECT(m.nkept == 0, "mem_keep_freed(0) releases the kept buffers");
    unsigned char *d = mem_alloc(&m, MEM_PARAMS, 64, "weights");
    mem_free(&m, d);
    EXPECT(m.nkept == 0, "with keeping off a freed buffer is released at once");
    mem_keep_freed(&m, 1);
    mem_free(&m, mem_alloc(&m, MEM_GRADS, 128, "kept at the end"));
    mem_destroy(&m);  // releases it: a leak here fails the sanitized build
}

int main(void) {
    test_categories();
    test_peak();
    test_alignment_and_zero();
    test_free_any_order();
    test_bad_frees();
    test_keep_freed();
    return test_done();
}
