// blas.cu — cuBLAS and cuBLASLt, loaded when a rank opens a GPU instead of when it starts.
//
// Linked in, libcublasLt runs its constructors before main in every process, GPU or not, and
// they touch hundreds of megabytes. A CPU rank never multiplies through cuBLAS, yet a CUDA
// build's test suite starts thousands of CPU ranks, and that start-up was most of their time.
// So the labs link only the CUDA runtime and NCCL, and cuda_open() loads these two with
// dlopen. Every call goes through the table `blas`, whose members have cuBLAS's own names and
// types (the headers' declarations, through decltype), so a call reads as the library's own:
// blas.cublasSgemm(...). test_build checks that no program links them again.
#include <dlfcn.h>
#include <stdio.h>

#include "context.cuh"

#define BLAS_STR2(x) #x
#define BLAS_STR(x) BLAS_STR2(x)
// The major version the headers were compiled against names the library: libcublas.so.13.
#define BLAS_SONAME(lib) lib ".so." BLAS_STR(CUBLAS_VER_MAJOR)

Blas blas;

// dlopen `soname` into *lib once; 0, or -1 with the loader's reason in err.
static int open_lib(void **lib, const char *soname, char *err, size_t nerr) {
    if (*lib) return 0;
    // The programs' RUNPATH names the toolkit's lib directory, so the soname alone finds it.
    if ((*lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL))) return 0;
    snprintf(err, nerr, "cannot load %s: %s", soname, dlerror());
    return -1;
}

extern "C" int cuda_load_blas(char *err, size_t nerr) {
    if (blas.loaded) return 0;
    if (open_lib(&blas.cublas_lib, BLAS_SONAME("libcublas"), err, nerr) != 0 ||
        open_lib(&blas.lt_lib, BLAS_SONAME("libcublasLt"), err, nerr) != 0)
        return -1;
    // A symbol missing means headers from one toolkit and a library from another.
#define BLAS_RESOLVE(lib, name)                                                                          \
    if (!(blas.name = (decltype(blas.name))dlsym(blas.lib, #name))) {                                   \
        snprintf(err, nerr, "%s has no %s: the CUDA headers and libraries are from different toolkits", \
                 #lib, #name);                                                                           \
        return -1;                                                                                       \
    }
    SHARDLAB_BLAS_FUNCTIONS(BLAS_RESOLVE)
    BLAS_RESOLVE(cublas_lib, cublasGemmEx)
#undef BLAS_RESOLVE
    blas.loaded = 1;
    return 0;
}
