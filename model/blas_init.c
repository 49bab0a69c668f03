/*
 * blas_init.c — OpenBLAS set up for the DNN: kernels this CPU can run, and
 * one thread per caller.
 *
 * Debian 12's OpenBLAS (0.3.21, built DYNAMIC_ARCH) picks its kernels by the
 * CPU's family and model number, and gives a CPU newer than itself its
 * generic "Prescott" kernels (SSE3).  On our VMs (Xeon model 207, Emerald
 * Rapids) that made the DNN's MLP take 1.7 ms of a standard request
 * instead of 0.6 ms.  So a constructor (before main, single-threaded, after
 * the library's own) checks what the library chose; when it is Prescott and
 * the user did not choose (OPENBLAS_CORETYPE unset), it sets
 * OPENBLAS_CORETYPE by the CPU's features (SkylakeX with AVX-512 F/BW/DQ/VL,
 * else Haswell with AVX2 and FMA, else it leaves things alone) and runs the
 * library's kernel selection again: gotoblas_dynamic_quit() and
 * gotoblas_dynamic_init(), exported by DYNAMIC_ARCH builds, which read that
 * variable.  They are weak references: a build without them links and
 * keeps the library's choice.  openblas_get_corename() says what won.
 *
 * Every program that links this file (any that scores or trains a DNN:
 * model_dnn_blas_init is here) gets the constructor.
 *
 * THREAD SAFETY: pick_kernels runs before main, single-threaded.
 * model_dnn_blas_init() may be called from any thread, any number of times.
 */
#include "dnn.h"

#include <cblas.h>
#include <stdlib.h>
#include <strings.h>

extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

__attribute__((constructor)) static void pick_kernels(void)
{
#if defined(__x86_64__)
    if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || getenv("OPENBLAS_CORETYPE"))
        return;
    const char *chosen = openblas_get_corename();
    if (!chosen || strcasecmp(chosen, "Prescott") != 0)
        return; /* the library knows this CPU */
    __builtin_cpu_init();
    const char *core = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        core = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        core = "Haswell";
    if (!core || setenv("OPENBLAS_CORETYPE", core, 0) != 0)
        return;
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
#endif
}

__attribute__((cold)) void model_dnn_blas_init(void)
{
    openblas_set_num_threads(1);
}
