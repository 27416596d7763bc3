/* The fused chunked kernel for one instruction set. _chunked.c includes this file once per ISA, with
 *
 *   VL      floats per vector register (16 for AVX-512, 8 for AVX2)
 *   NV_MAX  vectors per tile row: a tile is 4 rows x NV_MAX*VL columns of accumulators in registers
 *   ISA     the suffix of every name defined here (avx512, avx2)
 *
 * and a `#pragma GCC target` in force, so that GCC lowers the vector types below to that ISA.
 *
 * One chunk of L <= C tokens of one sequence, with the state (S, z) of all earlier tokens:
 *
 *   Fq = phi(Q_c)                          (L, d)   rows
 *   FkT = phi(K_c)^T                       (d, L)   transposed, so that scores come out as rows
 *   A = tril(Fq FkT)                       (L, L)   only its VL-column blocks on or below the diagonal
 *   den = rowsum(A) + Fq z                 (L)
 *   out = (Fq S + A V_c) / max(den, eps)   (L, d_v) straight from the accumulators to the output
 *   S += FkT V_c,  z += rowsum(FkT)
 *
 * Every product is one routine, fma_tile: acc[r][j] += a[r, k] * b[k, j] for 4 rows r and nv vectors
 * j, k = 0..K-1; `a` is read one number at a time (broadcast), `b` one vector at a time, so `a` may
 * have any layout and `b` needs its columns contiguous. That is why phi(K) is stored transposed.
 */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, ISA)

typedef float FN(vf) __attribute__((vector_size(VL * 4)));
typedef int FN(vi) __attribute__((vector_size(VL * 4)));
#define vf FN(vf)
#define vi FN(vi)
#define INLINE static inline __attribute__((always_inline))

/* Padded sizes: Cp = C rounded up to VL (so also to the tile height 4), dp = d rounded up to 4 (rows
 * of S and FkT come in tiles of 4), dvp = d_v rounded up to VL. */
static Work FN(layout)(const Problem *p)
{
    Work w = {.d = p->d, .dv = p->dv, .C = p->C, .phi = p->phi, .eps = p->eps};
    w.Cp = (p->C + VL - 1) / VL * VL;
    w.dp = (p->d + 3) / 4 * 4;
    w.dvp = (p->dv + VL - 1) / VL * VL;
    return w;
}

INLINE vf FN(load)(const float *p) { vf x; memcpy(&x, p, sizeof x); return x; }
INLINE void FN(store)(float *p, vf x) { memcpy(p, &x, sizeof x); }

/* A non-temporal store of one vector to an address aligned to its size: the line is written whole,
 * without being read into the cache first, and is not kept there. */
INLINE void FN(stream)(float *p, vf x)
{
#if VL == 16
    __builtin_ia32_movntps512(p, x);
#else
    __builtin_ia32_movntps256(p, x);
#endif
}

INLINE vf FN(splat)(float a)
{
    vf x = {a};
    return __builtin_shuffle(x, (vi){0});  /* lane 0 everywhere: one broadcast instruction */
}

INLINE vf FN(select)(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }
INLINE vf FN(vmax)(vf a, vf b) { return FN(select)(a > b, a, b); }
INLINE vf FN(vmin)(vf a, vf b) { return FN(select)(a < b, a, b); }

INLINE float FN(hsum)(vf x)
{
    float s = 0.0f;
    for (int i = 0; i < VL; i++) s += x[i];
    return s;
}

/* exp(x) for x <= 0 (what elu+1 needs), to about 1.5 ulp; below -87 it returns exp(-87) ~ 1.6e-38, the
 * smallest normal range, so a feature never underflows to zero. Cephes' expf: x = n ln2 + r with
 * |r| <= ln2/2 (ln2 split in two so that n ln2 is exact), exp(r) by its degree-7 polynomial (as one
 * Horner chain of FMAs), 2^n from the exponent bits, or with AVX-512 by one vscalefps. */
INLINE vf FN(exp_nonpos)(vf x)
{
    x = FN(vmax)(x, FN(splat)(-87.0f));
    const vf shifter = FN(splat)(12582912.0f);                 /* 1.5 * 2^23: round to nearest */
    vf n = (x * 1.44269504088896341f + shifter) - shifter;     /* round(x / ln2) */
    vf r = x - n * 0.693359375f + n * 2.12194440e-4f;          /* x - n ln2, ln2 in two parts */
    vf p = FN(splat)(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
#if VL == 16
    return __builtin_ia32_scalefps512_mask(p, n, p, (unsigned short)-1, 4);  /* p 2^n; 4: the current rounding */
#else
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;    /* 2^n, n >= -126: a normal number */
    return p * (vf)bits;
#endif
}

/* phi on one vector of inputs (see PHI_* in _chunked.c). elu+1 is exp(min(x, 0)) + max(x, 0). */
INLINE vf FN(phi)(vf x, int phi)
{
    const vf zero = FN(splat)(0.0f);
    if (phi == PHI_RELU) return FN(vmax)(x, zero);
    if (phi == PHI_ELU1) return FN(exp_nonpos)(FN(vmin)(x, zero)) + FN(vmax)(x, zero);
    return x;
}

/* phi of the floats x[kk .. min(kk + VL, d)) (a short last vector is loaded with zeros after it). */
INLINE vf FN(phi_at)(const float *x, long kk, long d, int phi)
{
    if (kk + VL <= d) return FN(phi)(FN(load)(x + kk), phi);
    vf v = FN(splat)(0.0f);
    memcpy(&v, x + kk, (size_t)(d - kk) * sizeof(float));
    return FN(phi)(v, phi);
}

INLINE void FN(fma_tile)(vf acc[4][NV_MAX], const int nv, long K, const float *a, long lda,
                         const float *b, long ldb)
{
    for (long k = 0; k < K; k++) {
        vf bv[NV_MAX];
#pragma GCC unroll 8
        for (int j = 0; j < nv; j++) bv[j] = FN(load)(b + k * ldb + j * VL);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            vf ar = FN(splat)(a[r * lda + k]);
#pragma GCC unroll 8
            for (int j = 0; j < nv; j++) acc[r][j] += ar * bv[j];
        }
    }
}

INLINE void FN(zero_tile)(vf acc[4][NV_MAX], const int nv)
{
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nv; j++) acc[r][j] = FN(splat)(0.0f);
}


/* A = tril(Fq FkT) for rows i0..i0+3, den = rowsum(A) + Fq z. Only the column vectors that hold a
 * column <= i0 + 3 are computed: the blocks above the diagonal are never formed. */
INLINE void FN(scores_tile)(Work *w, const int nv, long i0, long p0, float *rowsum)
{
    vf acc[4][NV_MAX];
    FN(zero_tile)(acc, nv);
    FN(fma_tile)(acc, nv, w->d, w->Fq + i0 * w->d, w->d, w->FkT + p0, w->Cp);
    vf lane;
    for (int i = 0; i < VL; i++) lane[i] = (float)i;
    for (int r = 0; r < 4; r++) {
        vf s = FN(splat)(0.0f);
        for (int j = 0; j < nv; j++) {
            vi causal = (lane + (float)(p0 + j * VL)) <= (float)(i0 + r); /* column t <= row i */
            acc[r][j] = (vf)(causal & (vi)acc[r][j]);
            FN(store)(w->A + (i0 + r) * w->Cp + p0 + j * VL, acc[r][j]);
            s += acc[r][j];
        }
        rowsum[r] += FN(hsum)(s);
    }
}

/* out rows i0..i0+3, columns j0..: (Fq S + A V_c) / max(den, eps), written to the output. */
INLINE void FN(output_tile)(Work *w, const int nv, long i0, long j0, long L, const float *S,
                            const float *Vc, long ldv, float *out)
{
    vf acc[4][NV_MAX];
    FN(zero_tile)(acc, nv);
    FN(fma_tile)(acc, nv, w->d, w->Fq + i0 * w->d, w->d, S + j0, w->dvp);  /* the state before */
    long T = i0 + 4 < L ? i0 + 4 : L;                                       /* A[i, t] = 0 for t > i */
    FN(fma_tile)(acc, nv, T, w->A + i0 * w->Cp, w->Cp, Vc + j0, ldv);       /* inside the chunk */
    for (int r = 0; r < 4 && i0 + r < L; r++) {
        vf scale = FN(splat)(w->rden[i0 + r]);
        float *row = out + (i0 + r) * w->dv;
        for (int j = 0; j < nv; j++) {
            long col = j0 + j * VL;
            vf y = acc[r][j] * scale;
            if (col + VL <= w->dv) FN(store)(row + col, y);
            else if (col < w->dv) memcpy(row + col, &y, (size_t)(w->dv - col) * sizeof(float));
        }
    }
}

/* S rows k0..k0+3, columns j0..: S += FkT V_c. */
INLINE void FN(state_tile)(Work *w, const int nv, long k0, long j0, long L, float *S,
                           const float *Vc, long ldv)
{
    vf acc[4][NV_MAX];
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nv; j++) acc[r][j] = FN(load)(S + (k0 + r) * w->dvp + j0 + j * VL);
    FN(fma_tile)(acc, nv, L, w->FkT + k0 * w->Cp, w->Cp, Vc + j0, ldv);
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nv; j++) FN(store)(S + (k0 + r) * w->dvp + j0 + j * VL, acc[r][j]);
}

/* The tile routines take nv as a constant (so that the accumulators live in registers): these
 * wrappers call them with nv = 1 .. NV_MAX. */
#if NV_MAX == 4
#define NV_SWITCH(nv, CALL) \
    switch (nv) { case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; default: CALL(4); }
#elif NV_MAX == 2
#define NV_SWITCH(nv, CALL) \
    switch (nv) { case 1: CALL(1); break; default: CALL(2); }
#else
#error "NV_MAX must be 2 or 4"
#endif

static void FN(scores)(Work *w, long i0, float *rowsum)
{
    long need = i0 / VL + 1;  /* column vectors 0..need-1 hold the columns <= i0 + 3 (VL >= 4) */
    for (long p = 0; p < need; p += NV_MAX) {
        int nv = (int)(need - p < NV_MAX ? need - p : NV_MAX);
#define CALL(n) FN(scores_tile)(w, n, i0, p * VL, rowsum)
        NV_SWITCH(nv, CALL)
#undef CALL
    }
}

static void FN(outputs)(Work *w, long i0, long L, const float *S, const float *Vc, long ldv,
                        float *out)
{
    long nvec = w->dvp / VL;
    for (long p = 0; p < nvec; p += NV_MAX) {
        int nv = (int)(nvec - p < NV_MAX ? nvec - p : NV_MAX);
#define CALL(n) FN(output_tile)(w, n, i0, p * VL, L, S, Vc, ldv, out)
        NV_SWITCH(nv, CALL)
#undef CALL
    }
}

static void FN(states)(Work *w, long k0, long L, float *S, const float *Vc, long ldv)
{
    long nvec = w->dvp / VL;
    for (long p = 0; p < nvec; p += NV_MAX) {
        int nv = (int)(nvec - p < NV_MAX ? nvec - p : NV_MAX);
#define CALL(n) FN(state_tile)(w, n, k0, p * VL, L, S, Vc, ldv)
        NV_SWITCH(nv, CALL)
#undef CALL
    }
}

/* x . y over n floats (vectors, then the tail). */
INLINE float FN(dot)(const float *x, const float *y, long n)
{
    vf s = FN(splat)(0.0f);
    long i = 0;
    for (; i + VL <= n; i += VL) s += FN(load)(x + i) * FN(load)(y + i);
    float t = FN(hsum)(s);
    for (; i < n; i++) t += x[i] * y[i];
    return t;
}

/* Fq = phi(Q_c), L rows of d. Rows L..(L rounded up to 4) are zeroed: a tile of 4 rows reads them. */
static void FN(features_q)(Work *w, const float *Q, long L)
{
    long d = w->d;
    for (long t = 0; t < L; t++)
        for (long kk = 0; kk < d; kk += VL) {  /* only the lanes below d are stored */
            vf f = FN(phi_at)(Q + t * d, kk, d, w->phi);
            memcpy(w->Fq + t * d + kk, &f, (size_t)(d - kk < VL ? d - kk : VL) * sizeof(float));
        }
    long rows = (L + 3) / 4 * 4;
    if (L < rows) memset(w->Fq + L * d, 0, (size_t)((rows - L) * d) * sizeof(float));
}

/* FkT = phi(K_c)^T: column t of FkT is token t. Its columns L..Cp-1 are left as they are: they only
 * ever meet masked (zero) scores, and the state products stop at t = L. */
static void FN(features_k)(Work *w, const float *K, long L)
{
    long d = w->d;
    for (long t = 0; t < L; t++)
        for (long kk = 0; kk < d; kk += VL) {
            vf f = FN(phi_at)(K + t * d, kk, d, w->phi);
            long m = d - kk < VL ? d - kk : VL;
            for (long l = 0; l < m; l++) w->FkT[(kk + l) * w->Cp + t] = f[l];
        }
}

/* V_c as the products read it: the input rows themselves, or, when d_v is not a multiple of VL, a
 * copy in rows padded with zeros (so that a whole vector can be loaded at the end of a row). */
static const float *FN(values)(Work *w, const float *V, long L, long *ldv)
{
    if (!w->Vp) {
        *ldv = w->dv;
        return V;
    }
    for (long t = 0; t < L; t++) memcpy(w->Vp + t * w->dvp, V + t * w->dv, (size_t)w->dv * sizeof(float));
    *ldv = w->dvp;
    return w->Vp;
}

/* S += FkT V_c and z += colsum phi(K_c): the state moves past the chunk. */
static void FN(advance)(Work *w, long L, const float *Vc, long ldv, float *S, float *z)
{
    for (long k0 = 0; k0 < w->d; k0 += 4) FN(states)(w, k0, L, S, Vc, ldv);
    for (long kk = 0; kk < w->d; kk++) {
        const float *row = w->FkT + kk * w->Cp;
        vf s = FN(splat)(0.0f);
        long t = 0;
        for (; t + VL <= L; t += VL) s += FN(load)(row + t);
        float total = FN(hsum)(s);
        for (; t < L; t++) total += row[t];
        z[kk] += total;
    }
}

/* One chunk of L tokens: Q, K: (L, d), V: (L, d_v) rows of the inputs, out: (L, d_v), den: (L);
 * (S, z) is the state before the chunk on entry and after it on return. */
static void FN(chunk)(Work *w, const float *Q, const float *K, const float *V, float *out,
                      float *den, long L, float *S, float *z)
{
    long d = w->d, ldv;
    FN(features_q)(w, Q, L);
    FN(features_k)(w, K, L);
    const float *Vc = FN(values)(w, V, L, &ldv);
    for (long i0 = 0; i0 < L; i0 += 4) {
        float rowsum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        FN(scores)(w, i0, rowsum);
        for (int r = 0; r < 4 && i0 + r < L; r++) {
            /* phi(q_i) . z is the earlier chunks' share of the denominator */
            float dn = rowsum[r] + FN(dot)(w->Fq + (i0 + r) * d, z, d);
            den[i0 + r] = dn;
            w->rden[i0 + r] = 1.0f / (dn > w->eps ? dn : w->eps);
        }
        FN(outputs)(w, i0, L, S, Vc, ldv, out);
    }
    FN(advance)(w, L, Vc, ldv, S, z);
}

/* Only the state of a span of n tokens: S += phi(K)^T V, z += colsum phi(K) (the first pass when a
 * sequence is split between threads). */
static void FN(state_only)(Work *w, const float *K, const float *V, long n, float *S, float *z)
{
    for (long c0 = 0; c0 < n; c0 += w->C) {
        long L = n - c0 < w->C ? n - c0 : w->C, ldv;
        FN(features_k)(w, K + c0 * w->d, L);
        const float *Vc = FN(values)(w, V + c0 * w->dv, L, &ldv);
        FN(advance)(w, L, Vc, ldv, S, z);
    }
}

/* The state of one work item is S (dp, dvp) followed by z (dp), in one array of this many floats. */
static long FN(state_floats)(const Problem *p)
{
    Work w = FN(layout)(p);
    return FLOATS_64(w.dp * w.dvp + w.dp);
}

/* One member's buffers: Fq (Cp, d), FkT (dp, Cp), A (Cp, Cp), rden (Cp), and Vp (Cp, dvp) when d_v
 * is not a multiple of VL; each rounded up to 64 bytes. */
static long FN(work_floats)(const Problem *p)
{
    Work w = FN(layout)(p);
    long n = FLOATS_64(w.Cp * w.d) + FLOATS_64(w.dp * w.Cp) + FLOATS_64(w.Cp * w.Cp) + FLOATS_64(w.Cp);
    return n + (w.dv % VL ? FLOATS_64(w.Cp * w.dvp) : 0);
}

/* The buffers carved out of mem (work_floats of them, 64-byte aligned). */
static void FN(work_views)(Work *w, const Problem *p, float *mem)
{
    *w = FN(layout)(p);
    w->Fq = mem;
    w->FkT = w->Fq + FLOATS_64(w->Cp * w->d);
    w->A = w->FkT + FLOATS_64(w->dp * w->Cp);
    w->rden = w->A + FLOATS_64(w->Cp * w->Cp);
    w->Vp = w->dv % VL ? w->rden + FLOATS_64(w->Cp) : NULL;
}

/* A member's buffers before its first item: zeros, as the padding must read as zeros. */
static void FN(work_prepare)(const Problem *p, float *mem)
{
    memset(mem, 0, (size_t)FN(work_floats)(p) * sizeof(float));
}

/* One work item: tokens [t0, t1) of sequence b, from the state S, z = state, state + dp * dvp, with
 * a member's buffers mem. Pass 1 only moves the state past the tokens; pass 2 writes their outputs
 * too. */
static void FN(run_item)(const Problem *p, float *mem, int pass, long b, long t0, long t1, float *state)
{
    Work work, *w = &work;
    FN(work_views)(w, p, mem);
    float *S = state, *z = state + w->dp * w->dvp;
    const float *Q = p->q + b * p->n * p->d, *K = p->k + b * p->n * p->d, *V = p->v + b * p->n * p->dv;
    if (pass == 1) {
        FN(state_only)(w, K + t0 * p->d, V + t0 * p->dv, t1 - t0, S, z);
        return;
    }
    float *out = p->out + b * p->n * p->dv, *den = p->den + b * p->n;
    for (long c0 = t0; c0 < t1; c0 += p->C) {
        long L = t1 - c0 < p->C ? t1 - c0 : p->C;
        FN(chunk)(w, Q + c0 * p->d, K + c0 * p->d, V + c0 * p->dv, out + c0 * p->dv, den + c0, L, S, z);
    }
}

/* --- the non-causal form: the state of all keys, then every query reads it ----------------------
 *
 *   pass 1:  S += phi(K_c)^T V_c,  z += colsum phi(K_c)     a chunk of keys at a time
 *   pass 2:  out = phi(Q_c) S / max(phi(Q_c) z, eps)         a chunk of queries at a time
 *
 * Two products and nothing else: no scores, no mask, and phi(K) kept as rows (no transposed copy, which
 * costs the causal form a scalar store per number). The normaliser rides along: z is summed from the
 * feature vectors while they are still in registers, and phi(q_i) . z is taken as the features of q_i
 * are computed, so neither costs a pass over the inputs or a copy of them. */

/* acc[r][j] += a[k * ka + r] * b[k * ldb + j * VL] for k < K: fma_tile with the 4 rows of `a` adjacent
 * and its k strided, so that S's rows come from phi(K_c) stored as rows (a = Fk + i0, ka = d). */
INLINE void FN(fma_tile_kt)(vf acc[4][NV_MAX], const int nv, long K, const float *a, long ka,
                            const float *b, long ldb)
{
    for (long k = 0; k < K; k++) {
        vf bv[NV_MAX];
#pragma GCC unroll 8
        for (int j = 0; j < nv; j++) bv[j] = FN(load)(b + k * ldb + j * VL);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            vf ar = FN(splat)(a[k * ka + r]);
#pragma GCC unroll 8
            for (int j = 0; j < nv; j++) acc[r][j] += ar * bv[j];
        }
    }
}

/* The sum of a vector's lanes as a tree (log2 VL shuffles and adds, not VL dependent adds). */
INLINE float FN(hsum_tree)(vf x)
{
    vi idx;
    for (int i = 0; i < VL; i++) idx[i] = i;
#pragma GCC unroll 8
    for (int h = VL / 2; h >= 1; h /= 2) x += __builtin_shuffle(x, (idx + h) & (VL - 1));
    return x[0];
}

/* The feature map as a constant inside the loops below (phi_rows is one loop per map, not one branch per
 * vector). */
#define PHI_SWITCH(phi, CALL) \
    switch (phi) { case PHI_RELU: CALL(PHI_RELU); break; case PHI_ELU1: CALL(PHI_ELU1); break; \
                   default: CALL(PHI_IDENTITY); }

/* Fk = phi(K_c) as L rows of d (in the buffer Fq, which the read fills only after the keys), z +=
 * colsum Fk: one column of vectors at a time, its sum kept in a register over the L rows. Whole
 * vectors are stored as they are; only a last partial one (d not a multiple of VL) is copied lane
 * by lane, as phi(0) may not be 0 in the lanes past d. Rows L..(L rounded up to 4) are not read:
 * the state's products stop at t = L. */
INLINE void FN(key_rows_phi)(Work *w, const float *K, long L, float *z, const int phi)
{
    long d = w->d, kk = 0;
    for (; kk + VL <= d; kk += VL) {
        vf s = FN(load)(z + kk);
        for (long t = 0; t < L; t++) {
            vf f = FN(phi)(FN(load)(K + t * d + kk), phi);
            FN(store)(w->Fq + t * d + kk, f);
            s += f;
        }
        FN(store)(z + kk, s);
    }
    if (kk < d) {
        long m = d - kk;
        vf s = FN(splat)(0.0f);
        for (long t = 0; t < L; t++) {
            vf f = FN(phi_at)(K + t * d, kk, d, phi);
            memcpy(w->Fq + t * d + kk, &f, (size_t)m * sizeof(float));
            s += f;
        }
        for (long l = 0; l < m; l++) z[kk + l] += s[l];
    }
}

static void FN(key_rows)(Work *w, const float *K, long L, float *z)
{
#define CALL(f) FN(key_rows_phi)(w, K, L, z, f)
    PHI_SWITCH(w->phi, CALL)
#undef CALL
}

/* S rows i0..i0+3, columns j0..: S += Fk^T V_c. */
INLINE void FN(key_tile)(Work *w, const int nv, long i0, long j0, long L, float *S, const float *Vc, long ldv)
{
    vf acc[4][NV_MAX];
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nv; j++) acc[r][j] = FN(load)(S + (i0 + r) * w->dvp + j0 + j * VL);
    FN(fma_tile_kt)(acc, nv, L, w->Fq + i0, w->d, Vc + j0, ldv);
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nv; j++) FN(store)(S + (i0 + r) * w->dvp + j0 + j * VL, acc[r][j]);
}

/* Asks the cache for slice i of `of` of the floats [x, x + n): the next chunk's inputs, a slice with
 * each row tile of the current chunk's product, so that they come from memory while it multiplies
 * and not after (the second level of cache: the first holds the operands of the product). */
INLINE void FN(prefetch_slice)(const float *x, long n, long i, long of)
{
    long lines = (n + 15) / 16, per = (lines + of - 1) / of, end = (i + 1) * per < lines ? (i + 1) * per : lines;
    for (long l = i * per; l < end; l++) __builtin_prefetch(x + l * 16, 0, 2);
}

/* Keys [0, n) of one sequence into the state: K: (n, d), V: (n, d_v) rows. The last row tile of S may
 * reach past d (to dp): it reads Fk's next numbers, and its rows of S are never read. */
static void FN(keys)(Work *w, const float *K, const float *V, long n, float *S, float *z)
{
    long nvec = w->dvp / VL, tiles = (w->d + 3) / 4;
    for (long c0 = 0; c0 < n; c0 += w->C) {
        long L = n - c0 < w->C ? n - c0 : w->C, ldv;
        long c1 = c0 + L, next = n - c1 < w->C ? n - c1 : w->C;  /* the next chunk: tokens [c1, c1 + next) */
        FN(key_rows)(w, K + c0 * w->d, L, z);
        const float *Vc = FN(values)(w, V + c0 * w->dv, L, &ldv);
        for (long i0 = 0; i0 < w->d; i0 += 4) {
            FN(prefetch_slice)(K + c1 * w->d, next * w->d, i0 / 4, tiles);
            FN(prefetch_slice)(V + c1 * w->dv, next * w->dv, i0 / 4, tiles);
            for (long p = 0; p < nvec; p += NV_MAX) {
                int nv = (int)(nvec - p < NV_MAX ? nvec - p : NV_MAX);
#define CALL(nn) FN(key_tile)(w, nn, i0, p * VL, L, S, Vc, ldv)
                NV_SWITCH(nv, CALL)
#undef CALL
            }
        }
    }
}

/* Fq = phi(Q_c), L rows of d, with den = Fq z and 1 / max(den, eps) taken from the same registers.
 * z is zero past d (the state's padding), so the lanes a last partial vector holds past d drop out
 * of den; Fq keeps only the lanes below d. Rows L..(L rounded up to 4) are zeroed: a tile of 4 rows
 * reads them. */
INLINE void FN(query_rows_phi)(Work *w, const float *Q, long L, const float *z, float *den, const int phi)
{
    long d = w->d;
    for (long t = 0; t < L; t++) {
        vf s = FN(splat)(0.0f);
        long kk = 0;
        for (; kk + VL <= d; kk += VL) {
            vf f = FN(phi)(FN(load)(Q + t * d + kk), phi);
            FN(store)(w->Fq + t * d + kk, f);
            s += f * FN(load)(z + kk);
        }
        if (kk < d) {
            vf f = FN(phi_at)(Q + t * d, kk, d, phi);
            memcpy(w->Fq + t * d + kk, &f, (size_t)(d - kk) * sizeof(float));
            s += f * FN(load)(z + kk);
        }
        float dn = FN(hsum_tree)(s);
        den[t] = dn;
        w->rden[t] = 1.0f / (dn > w->eps ? dn : w->eps);
    }
    long rows = (L + 3) / 4 * 4;
    if (L < rows) memset(w->Fq + L * d, 0, (size_t)((rows - L) * d) * sizeof(float));
}

static void FN(query_rows)(Work *w, const float *Q, long L, const float *z, float *den)
{
#define CALL(f) FN(query_rows_phi)(w, Q, L, z, den, f)
    PHI_SWITCH(w->phi, CALL)
#undef CALL
}

/* out rows i0..i0+3, columns j0..: Fq S / max(den, eps), written to the output; with w->stream, by
 * non-temporal stores (whole aligned vectors, see noncausal_item), which write a line without first
 * reading it into the cache. */
INLINE void FN(read_tile)(Work *w, const int nv, long i0, long j0, long L, const float *S, float *out)
{
    vf acc[4][NV_MAX];
    FN(zero_tile)(acc, nv);
    FN(fma_tile)(acc, nv, w->d, w->Fq + i0 * w->d, w->d, S + j0, w->dvp);
    for (int r = 0; r < 4 && i0 + r < L; r++) {
        vf scale = FN(splat)(w->rden[i0 + r]);
        float *row = out + (i0 + r) * w->dv;
        for (int j = 0; j < nv; j++) {
            long col = j0 + j * VL;
            vf y = acc[r][j] * scale;
            if (w->stream) FN(stream)(row + col, y);
            else if (col + VL <= w->dv) FN(store)(row + col, y);
            else if (col < w->dv) memcpy(row + col, &y, (size_t)(w->dv - col) * sizeof(float));
        }
    }
}

/* Queries [0, n) of one sequence read the state (S, z): Q: (n, d) rows, out: (n, d_v), den: (n). */
static void FN(queries)(Work *w, const float *Q, long n, const float *S, const float *z, float *out, float *den)
{
    long nvec = w->dvp / VL;
    for (long c0 = 0; c0 < n; c0 += w->C) {
        long L = n - c0 < w->C ? n - c0 : w->C, c1 = c0 + L, next = n - c1 < w->C ? n - c1 : w->C;
        FN(query_rows)(w, Q + c0 * w->d, L, z, den + c0);
        for (long i0 = 0; i0 < L; i0 += 4) {
            FN(prefetch_slice)(Q + c1 * w->d, next * w->d, i0 / 4, (L + 3) / 4);
            for (long p = 0; p < nvec; p += NV_MAX) {
                int nv = (int)(nvec - p < NV_MAX ? nvec - p : NV_MAX);
#define CALL(nn) FN(read_tile)(w, nn, i0, p * VL, L, S, out + c0 * w->dv)
                NV_SWITCH(nv, CALL)
#undef CALL
            }
        }
    }
}

/* One non-causal work item of sequence b. Pass 1: keys [t0, t1) added to the state; pass 2: queries
 * [t0, t1) read the whole state; pass 3: both, all keys then all queries (a whole sequence). */
static void FN(noncausal_item)(const Problem *p, float *mem, int pass, long b, long t0, long t1, float *state)
{
    Work work, *w = &work;
    FN(work_views)(w, p, mem);
    float *S = state, *z = state + w->dp * w->dvp;
    if (pass != 2) {
        long k0 = pass == 1 ? t0 : 0, k1 = pass == 1 ? t1 : p->n;
        const float *K = p->k + (b * p->n + k0) * p->d, *V = p->v + (b * p->n + k0) * p->dv;
        FN(keys)(w, K, V, k1 - k0, S, z);
    }
    if (pass != 1) {
        /* a large output is streamed past the cache (w->stream, see read_tile): whole rows of vectors,
         * aligned to a vector, and more of them than the cache would keep for whoever reads them next */
        w->stream = p->dv % VL == 0 && (uintptr_t)p->out % (VL * sizeof(float)) == 0 &&
                    p->nb * p->nq * p->dv >= NONCAUSAL_STREAM_FLOATS;
        long q0 = pass == 2 ? t0 : 0, q1 = pass == 2 ? t1 : p->nq;
        const float *Q = p->q + (b * p->nq + q0) * p->d;
        FN(queries)(w, Q, q1 - q0, S, z, p->out + (b * p->nq + q0) * p->dv, p->den + b * p->nq + q0);
        if (w->stream) __builtin_ia32_sfence();  /* the streamed stores done before the item is */
    }
}

/* The Kernel table of this instruction set is at the end of _chunked_back.h. */

#undef PHI_SWITCH
#undef vf
#undef vi
#undef INLINE
#undef FN
#undef CAT
#undef CAT_
/* NV_SWITCH stays defined for _chunked_back.h, which undefines it */
