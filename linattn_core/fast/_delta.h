/* The delta rule for one instruction set: one sequence's recurrence and its gradients (float32).
 * _chunked.c includes this file once per ISA, with the Kernel table of _chunked_back.h naming its functions.
 *
 * Per token t, with the features q_t, k_t (unit rows, computed by the caller), beta_t, and the state
 * S (d x d_v, rows of d_v contiguous):
 *
 *   r_t = v_t - S^T k_t        what the memory gets wrong about k_t
 *   u_t = beta_t r_t           the correction written
 *   S  += k_t u_t^T            y_t = S^T q_t
 *
 * which is delta.py's _recurrent; its chunked form gives the same numbers in another order. Every
 * loop runs along a row of S, so each update is a vector operation; one token is 3 d dv multiply-adds
 * (768 at d = dv = 16), too few for the chunked (WY) form's small matrix products and solves to pay off
 * on a CPU, which is why this runs token by token.
 *
 * The backward walks the tokens back with dS = dL/dS_t (from later tokens, and the final state's
 * own gradient):
 *
 *   dS += q_t dy_t^T;   dq_t = S_t dy_t;   du = dS^T k_t;   dk_t = dS u_t
 *   dbeta_t = du . r_t;  dv_t = beta_t du;  dp = -beta_t du
 *   dk_t += S_{t-1} dp;  dS += k_t dp^T                      (dS is now dL/dS_{t-1})
 *
 * It needs S_t in reverse order: the forward keeps the state before each chunk of C tokens (N / C
 * states of d x d_v), and the backward recomputes one chunk's states from it, then walks that chunk
 * back. The dot products are reductions along a row; `omp simd reduction` lets GCC split them
 * into vector partial sums (-fopenmp-simd, no threads from OpenMP).
 */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, ISA)
#define INLINE static inline __attribute__((always_inline))
#define vf FN(vf)
#define vi FN(vi)

INLINE float FN(row_dot)(const float *restrict a, const float *restrict b, long n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (long j = 0; j < n; j++) s += a[j] * b[j];
    return s;
}

/* S_out = S_in + k u^T with u = beta (v - S_in^T k): one write of the delta rule (S_out may be S_in);
 * r = v - S_in^T k is left in r. */
INLINE void FN(delta_write)(const float *S_in, float *S_out, const float *restrict k, const float *restrict v,
                            float beta, float *restrict r, float *restrict u, const long d, const long dv)
{
    for (long j = 0; j < dv; j++) r[j] = v[j];
    for (long i = 0; i < d; i++) {
        const float ki = k[i], *Si = S_in + i * dv;
#pragma omp simd
        for (long j = 0; j < dv; j++) r[j] -= ki * Si[j];
    }
    for (long j = 0; j < dv; j++) u[j] = beta * r[j];
    for (long i = 0; i < d; i++) {
        const float ki = k[i], *Si = S_in + i * dv;
        float *So = S_out + i * dv;
#pragma omp simd
        for (long j = 0; j < dv; j++) So[j] = Si[j] + ki * u[j];
    }
}

/* y = S^T q */
INLINE void FN(delta_read)(const float *restrict S, const float *restrict q, float *restrict y, const long d,
                           const long dv)
{
    for (long j = 0; j < dv; j++) y[j] = 0.0f;
    for (long i = 0; i < d; i++) {
        const float qi = q[i], *Si = S + i * dv;
#pragma omp simd
        for (long j = 0; j < dv; j++) y[j] += qi * Si[j];
    }
}

/* Floats of one member's buffers: forward r, u; backward the C + 1 states of a chunk, its r_t,
 * dS, du, dp, u. */
static long FN(delta_floats)(const DeltaProblem *p, int backward)
{
    long C = p->C < p->n ? p->C : p->n, s = p->d * p->dv;
    if (!backward) return 2 * FLOATS_64(p->dv);
    return FLOATS_64((C + 1) * s) + FLOATS_64(C * p->dv) + FLOATS_64(s) + 3 * FLOATS_64(p->dv);
}

/* The forward of sequence b: y, the final state, and (keep != NULL) the state before each chunk. */
INLINE void FN(delta_forward_sized)(const DeltaProblem *p, float *mem, long b, const long d, const long dv)
{
    const long n = p->n, s = d * dv;
    const float *Q = p->q + b * n * d, *K = p->k + b * n * d, *V = p->v + b * n * dv, *beta = p->beta + b * n;
    float *Y = p->y + b * n * dv, *S = p->S + b * s, *r = mem, *u = mem + FLOATS_64(dv);
    memset(S, 0, (size_t)s * sizeof(float));
    for (long t = 0; t < n; t++) {
        if (p->keep && t % p->C == 0) memcpy(p->keep + (b * p->chunks + t / p->C) * s, S, (size_t)s * sizeof(float));
        FN(delta_write)(S, S, K + t * d, V + t * dv, beta[t], r, u, d, dv);
        FN(delta_read)(S, Q + t * d, Y + t * dv, d, dv);
    }
}

/* Sums of lanes, VL rows at a time: out[i] = the sum of the lanes of a[i], for i < VL. Pairs of
 * vectors are merged level by level: each level halves the lanes that hold one row's partial sums and
 * doubles the rows a vector holds, so VL rows cost VL - 1 shuffle pairs and adds in all, instead of a
 * horizontal sum each. lo / hi of a level with g lanes per row pick, from the pair (x, y) seen as one
 * row of 2 VL lanes, the first / second g lanes of each group of 2 g. */
#define LO_LANE(L, g) (((L) / (g)) * 2 * (g) + (L) % (g))
#define HI_LANE(L, g) (LO_LANE(L, g) + (g))
#define LANES8(M, g) M(0, g), M(1, g), M(2, g), M(3, g), M(4, g), M(5, g), M(6, g), M(7, g)
#if VL == 16
#define LANES(M, g) LANES8(M, g), M(8, g), M(9, g), M(10, g), M(11, g), M(12, g), M(13, g), M(14, g), M(15, g)
#else
#define LANES(M, g) LANES8(M, g)
#endif
#define MERGE(g, rows)                                                                                     \
    for (int m = 0; m < (rows) / 2; m++)                                                                   \
        a[m] = __builtin_shuffle(a[2 * m], a[2 * m + 1], (vi){LANES(LO_LANE, g)}) +                        \
               __builtin_shuffle(a[2 * m], a[2 * m + 1], (vi){LANES(HI_LANE, g)});

INLINE vf FN(sum_lanes)(vf *a)
{
#if VL == 16
    MERGE(8, 16) MERGE(4, 8) MERGE(2, 4) MERGE(1, 2)
#else
    MERGE(4, 8) MERGE(2, 4) MERGE(1, 2)
#endif
    return a[0];
}

#undef MERGE
#undef LANES
#undef LANES8
#undef HI_LANE
#undef LO_LANE

/* out[i] = x_i . y + x2_i . y2 for the d rows x_i (and x2_i) of length dv (a multiple of VL); x2 may
 * be NULL. */
INLINE void FN(row_dots)(float *restrict out, const float *x, const float *restrict y, const float *x2,
                         const float *restrict y2, const long d, const long dv)
{
    for (long i0 = 0; i0 < d; i0 += VL) {
        vf acc[VL];
        for (long ii = 0; ii < VL; ii++) {
            vf sum = {0};
            if (i0 + ii < d)
                for (long j = 0; j < dv; j += VL) {
                    sum += FN(load)(x + (i0 + ii) * dv + j) * FN(load)(y + j);
                    if (x2) sum += FN(load)(x2 + (i0 + ii) * dv + j) * FN(load)(y2 + j);
                }
            acc[ii] = sum;
        }
        vf tot = FN(sum_lanes)(acc);
        for (long ii = 0; ii < VL && i0 + ii < d; ii++) out[i0 + ii] = tot[ii];
    }
}

/* One token of the backward: dS (dL/dS_t in, dL/dS_{t-1} out) and the token's dq, dk, dv, dbeta. */
INLINE void FN(delta_token_back)(float *restrict dS, const float *restrict S_t, const float *restrict S_prev,
                                 const float *restrict q, const float *restrict k, const float *restrict dy,
                                 const float *restrict r, float bt, float *restrict dq, float *restrict dk,
                                 float *restrict dv_t, float *restrict dbeta, float *restrict du, float *restrict dp,
                                 float *restrict u, const long d, const long dv)
{
    const int whole = dv % VL == 0;  /* rows of whole vectors: the dot products VL rows at a time */
    for (long j = 0; j < dv; j++) {
        u[j] = bt * r[j];
        du[j] = 0.0f;
    }
    for (long i = 0; i < d; i++) { /* dS += q dy^T, then du = dS^T k */
        float *dSi = dS + i * dv;
        const float qi = q[i], ki = k[i];
#pragma omp simd
        for (long j = 0; j < dv; j++) {
            dSi[j] += qi * dy[j];
            du[j] += ki * dSi[j];
        }
    }
    if (whole) /* dq = S_t dy */
        FN(row_dots)(dq, S_t, dy, NULL, NULL, d, dv);
    else
        for (long i = 0; i < d; i++) dq[i] = FN(row_dot)(S_t + i * dv, dy, dv);
    *dbeta = FN(row_dot)(du, r, dv);
    for (long j = 0; j < dv; j++) {
        dv_t[j] = bt * du[j];
        dp[j] = -bt * du[j];
    }
    if (whole) /* dk = dS u + S_{t-1} dp, with dS before its update below */
        FN(row_dots)(dk, dS, u, S_prev, dp, d, dv);
    else
        for (long i = 0; i < d; i++) dk[i] = FN(row_dot)(dS + i * dv, u, dv) + FN(row_dot)(S_prev + i * dv, dp, dv);
    for (long i = 0; i < d; i++) { /* dS += k dp^T */
        float *dSi = dS + i * dv;
        const float ki = k[i];
#pragma omp simd
        for (long j = 0; j < dv; j++) dSi[j] += ki * dp[j];
    }
}

/* The gradients of sequence b (dq, dk, dv, dbeta), from dy and the final state's dS (or zero). */
INLINE void FN(delta_backward_sized)(const DeltaProblem *p, float *mem, long b, const long d, const long dv)
{
    const long n = p->n, s = d * dv, C = p->C;
    const long off = b * n;
    const float *Q = p->q + off * d, *K = p->k + off * d, *V = p->v + off * dv, *beta = p->beta + off;
    const float *dY = p->dy + off * dv;
    float *dQ = p->dq + off * d, *dK = p->dk + off * d, *dV = p->dv_ + off * dv, *dbeta = p->dbeta + off;
    float *St = mem, *R = St + FLOATS_64((C + 1) * s), *dS = R + FLOATS_64(C * dv);
    float *du = dS + FLOATS_64(s), *dp = du + FLOATS_64(dv), *u = dp + FLOATS_64(dv);
    if (p->dS)
        memcpy(dS, p->dS + b * s, (size_t)s * sizeof(float));
    else
        memset(dS, 0, (size_t)s * sizeof(float));
    for (long c = p->chunks - 1; c >= 0; c--) {
        const long t0 = c * C, L = n - t0 < C ? n - t0 : C;
        memcpy(St, p->keep + (b * p->chunks + c) * s, (size_t)s * sizeof(float));
        for (long t = 0; t < L; t++) /* St[t + 1]: the state after token t0 + t */
            FN(delta_write)(St + t * s, St + (t + 1) * s, K + (t0 + t) * d, V + (t0 + t) * dv, beta[t0 + t],
                            R + t * dv, u, d, dv);
        for (long t = L - 1; t >= 0; t--) {
            const long g = t0 + t;
            FN(delta_token_back)(dS, St + (t + 1) * s, St + t * s, Q + g * d, K + g * d, dY + g * dv, R + t * dv,
                                 beta[g], dQ + g * d, dK + g * d, dV + g * dv, dbeta + g, du, dp, u, d, dv);
        }
    }
}

/* The forward and backward of one sequence, with the common head sizes as constants (so that every
 * row loop is unrolled into whole vectors) and any other size as it comes. */
#define DELTA_SIZES(call)                                                                                    \
    if (p->d == 16 && p->dv == 16)                                                                          \
        call(p, mem, b, 16, 16);                                                                            \
    else if (p->d == 32 && p->dv == 32)                                                                     \
        call(p, mem, b, 32, 32);                                                                            \
    else if (p->d == 64 && p->dv == 64)                                                                     \
        call(p, mem, b, 64, 64);                                                                            \
    else                                                                                                    \
        call(p, mem, b, p->d, p->dv)

static void FN(delta_forward)(const DeltaProblem *p, float *mem, long b) { DELTA_SIZES(FN(delta_forward_sized)); }
static void FN(delta_backward)(const DeltaProblem *p, float *mem, long b) { DELTA_SIZES(FN(delta_backward_sized)); }

#undef DELTA_SIZES
#undef vf
#undef vi
#undef INLINE
#undef FN
#undef CAT
#undef CAT_
