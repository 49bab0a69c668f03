/*
 * sigmoid.h — the one logistic function every scorer and trainer in model/
 * uses, so that a trainer's prediction and a served score of the same margin
 * are the same float.  Internal to model/.
 */
#ifndef TL_MODEL_SIGMOID_H
#define TL_MODEL_SIGMOID_H

#include <math.h>

static inline float sigmoid(double x)
{
    if (x >= 0)
        return (float)(1.0 / (1.0 + exp(-x)));
    double e = exp(x); /* no overflow for very negative x */
    return (float)(e / (1.0 + e));
}

#endif /* TL_MODEL_SIGMOID_H */
