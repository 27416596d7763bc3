/* The backward pass of the fused chunked kernel, for one instruction set. _chunked.c includes this
 * file right after _chunked_body.h, with the same VL, NV_MAX, ISA and `#pragma GCC target`, and uses
 * that file's vector helpers (load, splat, phi, ...).
 *
 * One work item is one sequence (the team in _chunked.c hands them out). With g_i = dL/dnum_i
 * (dout_i / c_i, c_i = max(den_i, eps), or dout_i itself without the denominator), see
 * linattn_core/linear_grad.py for the derivation:
 *
 *   pass 1, forwards:   keep the state before every chunk, S^T (d_v, f) and z (f); then
 *                       S^T += V_c^T Fk, z += colsum Fk
 *   pass 2, backwards, with the suffix states R = sum_{later i} phi(q_i) g_i^T (f, d_v), r (f):
 *     A    = tril(Fq Fk^T)               den = rowsum(A) + Fq z,  g = dout / max(den, eps)
 *     P    = tril(g V_c^T)               E = g S^T    (S a_i: the earlier chunks' part of dphi(q_i))
 *     beta = -[den >= eps] (rowsum(A * P) + rowdot(Fq, E)) / c;   P += beta (j <= i), E += beta z^T
 *     dFq  = P Fk + E                    dFk = P^T Fq + V_c R^T + r      dV = A^T g + Fk R
 *     R   += Fq^T g,  r += Fq^T beta
 *   and dq = dFq * phi'(q), dk = dFk * phi'(k), written straight to the gradients.
 *
 * Every product is one routine, gemm: C (=|+=) a(i, k) B[k, :], with `a` read one number at a time at
 * any strides (so A^T and P^T need no copy) and B one vector at a time. Every buffer is padded with
 * zeros (rows to the tile height, columns to the vector length), so whole tiles can be read.
 */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, ISA)
#define vf FN(vf)
#define vi FN(vi)
#define INLINE static inline __attribute__((always_inline))

/* Padded sizes and the buffers of one member (floats; see back_views). */
typedef struct {
    long d, dv, C, Cp, fp, dvp, chunks;
    int phi, normalize;
    float eps;
    float *Fq, *Dq, *Fk, *Dk;  /* (Cp, fp): phi and phi' of the chunk's q and k */
    float *FkT;                /* (fp, Cp): phi(K_c)^T */
    float *Vc, *Vpad, *VT;     /* (Cp, dvp): the chunk's values (the input's rows, or Vpad); (dvp, Cp) */
    float *G;                  /* (Cp, dvp): g */
    float *A, *P;              /* (Cp, Cp) */
    float *E, *dFk, *dVc;      /* (Cp, fp), (Cp, fp), (Cp, dvp) */
    float *R, *RT, *r;         /* (fp, dvp), (dvp, fp), (fp): the suffix states */
    float *den, *rc, *beta;    /* (Cp): den, 1 / c, beta */
    float *ones;               /* (Cp): ones, to sum a row as a dot product */
    float *states;             /* (chunks, dvp * fp + fp): S^T and z before every chunk */
} FN(Back);

#define Back FN(Back)

static Back FN(back_layout)(const Problem *p)
{
    Back w = {.d = p->d, .dv = p->dv, .C = p->C, .phi = p->phi, .eps = p->eps};
    w.Cp = (p->C + VL - 1) / VL * VL;
    w.fp = (p->d + VL - 1) / VL * VL;
    w.dvp = (p->dv + VL - 1) / VL * VL;
    w.chunks = (p->n + p->C - 1) / p->C;
    return w;
}

/* One tile: rows i0..i0+3 of C, columns j0 .. j0 + nv*VL; k over [k0, k1); starting from c0 (rows
 * of ldc floats, may be c itself) or from zero (c0 NULL). */
INLINE void FN(gemm_tile)(const int nv, float *c, long ldc, const float *c0, const float *a, long sr,
                          long sk, long k0, long k1, const float *b, long ldb)
{
    vf acc[4][NV_MAX];
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nv; j++) acc[r][j] = c0 ? FN(load)(c0 + r * ldc + j * VL) : FN(splat)(0.0f);
    for (long k = k0; k < k1; k++) {
        vf bv[NV_MAX];
#pragma GCC unroll 8
        for (int j = 0; j < nv; j++) bv[j] = FN(load)(b + k * ldb + j * VL);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            vf ar = FN(splat)(a[r * sr + k * sk]);
#pragma GCC unroll 8
            for (int j = 0; j < nv; j++) acc[r][j] += ar * bv[j];
        }
    }
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nv; j++) FN(store)(c + r * ldc + j * VL, acc[r][j]);
}

/* C[i, :ncols] = C0[i, :ncols] (or 0 when C0 is NULL) + sum_k a(i, k) B[k, :ncols] for i < M (a
 * multiple of 4, ncols of VL), a(i, k) = a[i * sr + k * sk]; C0 may be C itself (C +=) and has C's
 * row length. shape: FULL, k < K; LOWER (a(i, k) = 0 for k > i), k < min(i + 4, K) for a tile of
 * rows from i; UPPER (a(i, k) = 0 for k < i), i0 <= k < K. */
static void FN(gemm)(float *c, long ldc, long M, long ncols, const float *c0, const float *a, long sr,
                     long sk, long K, int shape, const float *b, long ldb)
{
    long nvec = ncols / VL;
    for (long i0 = 0; i0 < M; i0 += 4) {
        long k0 = shape == UPPER ? i0 : 0;
        long k1 = shape == LOWER && i0 + 4 < K ? i0 + 4 : K;
        for (long p = 0; p < nvec; p += NV_MAX) {
            int nv = (int)(nvec - p < NV_MAX ? nvec - p : NV_MAX);
            float *cc = c + i0 * ldc + p * VL;
            const float *cc0 = c0 ? c0 + i0 * ldc + p * VL : NULL, *aa = a + i0 * sr, *bb = b + p * VL;
#define CALL(n) FN(gemm_tile)(n, cc, ldc, cc0, aa, sr, sk, k0, k1, bb, ldb)
            NV_SWITCH(nv, CALL)
#undef CALL
        }
    }
}

/* M = tril(X Y^T) inside the chunk, (Cp, Cp): X (Cp, w) rows, YT (w, Cp); only the column vectors
 * that hold a column <= the tile's last row are computed (the rest is never read). */
static void FN(lower)(const Back *w, float *M, const float *X, long ldx, long K, const float *YT, long L)
{
    vf lane;
    for (int i = 0; i < VL; i++) lane[i] = (float)i;
    for (long i0 = 0; i0 < L; i0 += 4) {
        long need = i0 / VL + 1;
        FN(gemm)(M + i0 * w->Cp, w->Cp, 4, need * VL, NULL, X + i0 * ldx, ldx, 1, K, FULL, YT, w->Cp);
        for (int r = 0; r < 4; r++)
            for (long p = 0; p < need; p++) {
                float *row = M + (i0 + r) * w->Cp + p * VL;
                vi causal = (lane + (float)(p * VL)) <= (float)(i0 + r);
                FN(store)(row, (vf)(causal & (vi)FN(load)(row)));
            }
    }
}

/* phi and phi' of L rows of x (d floats each) into F, D (Cp, fp; D may be NULL); the padding stays
 * zero. */
static void FN(features_slope)(const Back *w, const float *x, long L, float *F, float *D)
{
    const vf zero = FN(splat)(0.0f), one = FN(splat)(1.0f);
    for (long t = 0; t < L; t++)
        for (long kk = 0; kk < w->d; kk += VL) {
            vf v = zero;
            long m = w->d - kk < VL ? w->d - kk : VL;
            memcpy(&v, x + t * w->d + kk, (size_t)m * sizeof(float));
            vf f = v, s = one;
            if (w->phi == PHI_RELU) {
                s = (vf)((v > zero) & (vi)one);  /* phi'(0) = 0, as torch's relu */
                f = FN(vmax)(v, zero);
            } else if (w->phi == PHI_ELU1) {
                s = FN(exp_nonpos)(FN(vmin)(v, zero));  /* exp(min(x, 0)): 1 for x > 0 */
                f = s + FN(vmax)(v, zero);
            }
            if (m < VL) {  /* lanes past d: zero, whatever phi(0) is */
                for (long l = m; l < VL; l++) f[l] = s[l] = 0.0f;
            }
            FN(store)(F + t * w->fp + kk, f);
            if (D) FN(store)(D + t * w->fp + kk, s);
        }
}

/* dst (cols, rows) = src (rows, cols)^T, both row-major with the given row lengths. */
static void FN(transpose)(float *dst, long ldd, const float *src, long lds, long rows, long cols)
{
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}

/* Rows t < L of Fq, Fk, V_c, and (with_q: pass 2) the slopes and the transposes FkT, VT. V_c is the
 * input's rows themselves unless they need padding (rows of dvp floats either way). */
static void FN(load_chunk)(Back *w, const float *Q, const float *K, const float *V, long L, int with_q)
{
    if (L < w->Cp) {  /* a short chunk: the rows past L must read as zeros */
        memset(w->Fq, 0, (size_t)(w->Cp * w->fp) * sizeof(float));
        memset(w->Fk, 0, (size_t)(w->Cp * w->fp) * sizeof(float));
        memset(w->Vpad, 0, (size_t)(w->Cp * w->dvp) * sizeof(float));
        memset(w->G, 0, (size_t)(w->Cp * w->dvp) * sizeof(float));
        memset(w->FkT, 0, (size_t)(w->fp * w->Cp) * sizeof(float));
        memset(w->VT, 0, (size_t)(w->dvp * w->Cp) * sizeof(float));
    }
    if (with_q) FN(features_slope)(w, Q, L, w->Fq, w->Dq);
    FN(features_slope)(w, K, L, w->Fk, with_q ? w->Dk : NULL);
    if (w->dv == w->dvp && L == w->Cp) {
        w->Vc = (float *)V;  /* read only */
    } else {
        w->Vc = w->Vpad;
        for (long t = 0; t < L; t++) memcpy(w->Vc + t * w->dvp, V + t * w->dv, (size_t)w->dv * sizeof(float));
    }
    if (with_q) {
        FN(transpose)(w->FkT, w->Cp, w->Fk, w->fp, L, w->fp);
        FN(transpose)(w->VT, w->Cp, w->Vc, w->dvp, L, w->dvp);
    }
}

/* One chunk of L tokens backwards (Q, K, V, dO and the gradients point at its first row); ST, z: the
 * state before the chunk; w->R, w->RT, w->r: the suffix states after it, on return before it. */
static void FN(chunk_back)(Back *w, const float *Q, const float *K, const float *V,
                           const float *dO, float *dq, float *dk, float *dv, long L, const float *ST,
                           const float *z)
{
    long Cp = w->Cp, fp = w->fp, dvp = w->dvp, d = w->d, M = (L + 3) / 4 * 4;
    FN(load_chunk)(w, Q, K, V, L, 1);
    FN(lower)(w, w->A, w->Fq, fp, d, w->FkT, L);                                /* A = tril(Fq Fk^T) */
    /* den, and g = dout / max(den, eps) (or dout) */
    for (long t = 0; t < L; t++) {
        float scale = 1.0f;
        if (w->normalize) {
            /* the row's columns past t are zeros up to its last vector: a dot with ones sums it */
            long row = (t / 4 * 4 / VL + 1) * VL;
            float s = FN(dot)(w->A + t * Cp, w->ones, row) + FN(dot)(w->Fq + t * fp, z, d);
            w->den[t] = s;
            scale = 1.0f / (s > w->eps ? s : w->eps);
            w->rc[t] = scale;
        }
        for (long e = 0; e < w->dv; e++) w->G[t * dvp + e] = dO[t * w->dv + e] * scale;
    }
    FN(lower)(w, w->P, w->G, dvp, w->dv, w->VT, L);                             /* P = tril(g V^T) */
    FN(gemm)(w->E, fp, M, fp, NULL, w->G, dvp, 1, w->dv, FULL, ST, fp);         /* E = g S^T */
    if (w->normalize)
        for (long t = 0; t < L; t++) {
            /* a_t . num_t = sum_j A_tj P_tj + phi(q_t) . (S a_t) */
            float an = FN(dot)(w->A + t * Cp, w->P + t * Cp, (t / 4 * 4 / VL + 1) * VL)
                       + FN(dot)(w->Fq + t * fp, w->E + t * fp, d);
            float beta = w->den[t] >= w->eps ? -an * w->rc[t] : 0.0f;  /* no gradient where clamped */
            w->beta[t] = beta;
            for (long j = 0; j <= t; j++) w->P[t * Cp + j] += beta;
            for (long f = 0; f < d; f++) w->E[t * fp + f] += beta * z[f];
        }
    FN(gemm)(w->E, fp, M, fp, w->E, w->P, Cp, 1, L, LOWER, w->Fk, fp);          /* dFq = E + P Fk */
    FN(gemm)(w->dFk, fp, M, fp, NULL, w->P, 1, Cp, L, UPPER, w->Fq, fp);        /* dFk = P^T Fq */
    FN(gemm)(w->dFk, fp, M, fp, w->dFk, w->Vc, dvp, 1, w->dv, FULL, w->RT, fp); /*     + V R^T */
    /* dV straight into the gradient when its rows need no padding */
    int direct = w->dv == dvp && L == Cp;
    float *dV = direct ? dv : w->dVc;
    FN(gemm)(dV, dvp, M, dvp, NULL, w->A, 1, Cp, L, UPPER, w->G, dvp);          /* dV = A^T g */
    FN(gemm)(dV, dvp, M, dvp, dV, w->Fk, fp, 1, d, FULL, w->R, dvp);            /*    + Fk R */
    for (long t = 0; t < L; t++) {
        for (long f = 0; f < d; f++) {
            dq[t * d + f] = w->E[t * fp + f] * w->Dq[t * fp + f];
            dk[t * d + f] = (w->dFk[t * fp + f] + w->r[f]) * w->Dk[t * fp + f];
        }
        if (!direct) memcpy(dv + t * w->dv, w->dVc + t * dvp, (size_t)w->dv * sizeof(float));
    }
    /* the suffix states take this chunk in: R += Fq^T g, r += Fq^T beta */
    FN(gemm)(w->R, dvp, fp, dvp, w->R, w->Fq, 1, fp, L, FULL, w->G, dvp);       /* R += Fq^T g */
    FN(transpose)(w->RT, fp, w->R, dvp, fp, dvp);
    if (w->normalize)
        for (long t = 0; t < L; t++)
            for (long f = 0; f < d; f++) w->r[f] += w->beta[t] * w->Fq[t * fp + f];
}

/* Floats of one member's buffers, every one rounded up to 64 bytes. */
static long FN(back_floats)(const Problem *p)
{
    Back w = FN(back_layout)(p);
    long cf = FLOATS_64(w.Cp * w.fp), cv = FLOATS_64(w.Cp * w.dvp), cc = FLOATS_64(w.Cp * w.Cp);
    long sv = FLOATS_64(w.fp * w.dvp), c1 = FLOATS_64(w.Cp);
    return 6 * cf + 3 * cv + FLOATS_64(w.fp * w.Cp) + FLOATS_64(w.dvp * w.Cp) + 2 * cc + 2 * sv
           + FLOATS_64(w.fp) + 4 * c1 + FLOATS_64(w.chunks * (w.dvp * w.fp + w.fp));
}

/* Carve one member's buffers out of mem (back_floats of them, 64-byte aligned). */
static void FN(back_views)(Back *w, const Problem *p, int normalize, float *mem)
{
    *w = FN(back_layout)(p);
    w->normalize = normalize;
    long cf = FLOATS_64(w->Cp * w->fp), cv = FLOATS_64(w->Cp * w->dvp), cc = FLOATS_64(w->Cp * w->Cp);
    long sv = FLOATS_64(w->fp * w->dvp), c1 = FLOATS_64(w->Cp);
    float *m = mem;
#define TAKE(field, floats) (w->field = m, m += (floats))
    TAKE(Fq, cf); TAKE(Dq, cf); TAKE(Fk, cf); TAKE(Dk, cf); TAKE(E, cf); TAKE(dFk, cf);
    TAKE(Vpad, cv); TAKE(G, cv); TAKE(dVc, cv);
    TAKE(FkT, FLOATS_64(w->fp * w->Cp)); TAKE(VT, FLOATS_64(w->dvp * w->Cp));
    TAKE(A, cc); TAKE(P, cc); TAKE(R, sv); TAKE(RT, sv); TAKE(r, FLOATS_64(w->fp));
    TAKE(den, c1); TAKE(rc, c1); TAKE(beta, c1); TAKE(ones, c1);
    TAKE(states, FLOATS_64(w->chunks * (w->dvp * w->fp + w->fp)));
#undef TAKE
}

/* A member's buffers before its first sequence: zeros (the padding must read as zeros), and the
 * ones. */
static void FN(back_prepare)(const Problem *p, float *mem)
{
    Back w;
    FN(back_views)(&w, p, 0, mem);
    memset(mem, 0, (size_t)FN(back_floats)(p) * sizeof(float));
    for (long t = 0; t < w.Cp; t++) w.ones[t] = 1.0f;
}

/* One work item, the gradients of sequence b with a member's buffers mem: pass 1 keeps the states,
 * pass 2 walks the chunks back. */
static void FN(back_sequence)(const Problem *p, const Grads *g, float *mem, long b)
{
    Back work, *w = &work;
    FN(back_views)(w, p, g->normalize, mem);
    long n = p->n, d = p->d, dvn = p->dv, C = p->C, sf = w->dvp * w->fp + w->fp;
    const float *Q = p->q + b * n * d, *K = p->k + b * n * d, *V = p->v + b * n * dvn;
    const float *dO = g->dout + b * n * dvn;
    float *dq = g->dq, *dk = g->dk, *dv = g->dv;
    memset(w->states, 0, (size_t)sf * sizeof(float));
    for (long c = 0; c + 1 < w->chunks; c++) {  /* state before chunk c + 1 = before c + chunk c */
        long c0 = c * C, L = n - c0 < C ? n - c0 : C;
        const float *prev = w->states + c * sf;
        float *next = w->states + (c + 1) * sf;
        FN(load_chunk)(w, NULL, K + c0 * d, V + c0 * dvn, L, 0);
        FN(gemm)(next, w->fp, w->dvp, w->fp, prev, w->Vc, 1, w->dvp, L, FULL, w->Fk, w->fp);  /* S^T += V^T Fk */
        float *zn = next + w->dvp * w->fp;
        memcpy(zn, prev + w->dvp * w->fp, (size_t)w->fp * sizeof(float));
        for (long t = 0; t < L; t++)
            for (long f = 0; f < d; f++) zn[f] += w->Fk[t * w->fp + f];
    }
    memset(w->R, 0, (size_t)(w->fp * w->dvp) * sizeof(float));
    memset(w->RT, 0, (size_t)(w->dvp * w->fp) * sizeof(float));
    memset(w->r, 0, (size_t)w->fp * sizeof(float));
    for (long c = w->chunks - 1; c >= 0; c--) {
        long c0 = c * C, L = n - c0 < C ? n - c0 : C;
        const float *S = w->states + c * sf;
        FN(chunk_back)(w, Q + c0 * d, K + c0 * d, V + c0 * dvn, dO + c0 * dvn, dq + b * n * d + c0 * d,
                       dk + b * n * d + c0 * d, dv + b * n * dvn + c0 * dvn, L, S, S + w->dvp * w->fp);
    }
}

static const Kernel FN(kernel) = {
    .name = STR(ISA),
    .state_floats = FN(state_floats),
    .work_floats = FN(work_floats),
    .work_prepare = FN(work_prepare),
    .run = FN(run_item),
    .noncausal_run = FN(noncausal_item),
    .back_floats = FN(back_floats),
    .back_prepare = FN(back_prepare),
    .back_run = FN(back_sequence),
    .delta_floats = FN(delta_floats),
    .delta_forward = FN(delta_forward),
    .delta_backward = FN(delta_backward),
};

#undef Back
#undef NV_SWITCH
#undef vf
#undef vi
#undef INLINE
#undef FN
#undef CAT
#undef CAT_
