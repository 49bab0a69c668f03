/*
 * ffm_testutil.h — what the FFM tests (test_ffm_*.c) share: a xorshift rng,
 * uniform doubles, a double sigmoid and the naive O(n^2) FFM margin the
 * scorer and the trainer's gradient are checked against.
 *
 * THREAD SAFETY: the rng state is the caller's.
 */
#ifndef TL_TESTS_FFM_TESTUTIL_H
#define TL_TESTS_FFM_TESTUTIL_H

#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "model/train_impl.h"
#include "model/metrics.h"
#include "model/model.h"
#include "model/reader.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


uint64_t rnd(uint64_t *s);
double urand(uint64_t *s, double lo, double hi);
double sigmoid_d(double x);
/* Naive FFM margin over n features: rows[a] = [w | v_0 .. v_{F-1}] (stride
 * 1 + F k, double), fld[a] their fields, x[a] their values. */
double naive_margin(double bias, const double *rows, const uint32_t *fld, const double *x,
                    uint32_t n, uint32_t F, uint32_t k, bool norm);

#endif
