/* linattn_core.fast._chunked: causal linear attention, the chunked form, fused into one pass (float32, CPU).
 *
 * The same algorithm as linear.causal_chunked, arranged so that each chunk lives in the core's cache:
 * for every chunk of C tokens of a sequence, phi(Q_c) and phi(K_c) are computed into small buffers,
 * then the masked C x C scores, the outputs (normalized as they leave the registers) and the new
 * state (S, z) follow, before the next chunk is read. q, k and v are read once and the output is
 * written once; nothing of size N is allocated. The products are register-tiled FMA loops written
 * with GCC's vector extensions, compiled for AVX-512 and for AVX2 and chosen at run time.
 *
 * One team of threads (run_team) does the work of every pass, forward and backward: its members
 * claim work items one at a time. The forward's items are whole sequences (batch x heads); when there
 * are fewer sequences than threads, each sequence is split into segments: a first pass computes each
 * segment's state S, z (that part of the work twice), prefix sums give every segment the state it
 * starts from, and a second pass computes the outputs of all segments at once. The backward's items
 * are whole sequences. The instruction sets' files only do the work of one item.
 *
 * Python calls this through linattn_core.fast.kernel, which checks the tensors first: the functions below
 * check sizes, but trust the addresses and contiguity they are given. All memory, the threads'
 * buffers included, comes from one workspace the caller passes in (so a call allocates nothing here).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

enum { PHI_IDENTITY = 0, PHI_RELU = 1, PHI_ELU1 = 2, PHI_COUNT = 3 };

/* One call: q, k: (nb, n, d), v: (nb, n, dv), out: (nb, n, dv), den: (nb, n), all contiguous. */
typedef struct {
    const float *q, *k, *v;
    float *out, *den;
    long nb, n, d, dv, C;
    int phi;
    float eps;
    long nq;  /* the non-causal form's queries per sequence (q: (nb, nq, d), out, den); n counts the keys */
} Problem;

/* The backward pass of a call: dout (nb, n, dv) in; dq, dk (nb, n, d) and dv (nb, n, dv) out. */
typedef struct {
    const float *dout;
    float *dq, *dk, *dv;
    int normalize;  /* the gradient of out = num / max(den, eps), or (0) of the numerator alone */
} Grads;

/* One member's view of its chunk buffers (see the top of _chunked_body.h). The sizes are padded
 * for the instruction set: Cp and dvp to its vector length, dp to the tile height 4. */
typedef struct {
    long d, dv, C, Cp, dp, dvp;
    int phi;
    float eps;
    float *Fq;   /* (Cp, d): phi(Q_c) */
    float *FkT;  /* (dp, Cp): phi(K_c) transposed, rows d..dp-1 zero */
    float *A;    /* (Cp, Cp): the masked scores */
    float *Vp;   /* (Cp, dvp): V_c with zero padding, when d_v is not a multiple of the vector length */
    float *rden; /* (Cp): 1 / max(den, eps) */
    int stream;  /* the non-causal read writes its output with non-temporal stores */
} Work;

/* One call of the delta rule (_delta.h): q, k: (nb, n, d) unit-row features, v: (nb, n, dv), beta: (nb, n);
 * out y: (nb, n, dv), S: (nb, d, dv) the final state, keep: (nb, chunks, d, dv) the state before each chunk
 * of C tokens (NULL: not kept). The backward reads keep, dy (nb, n, dv) and dS (nb, d, dv, or NULL for
 * zero) and writes dq, dk, dv_, dbeta. All contiguous. */
typedef struct {
    const float *q, *k, *v, *beta;
    float *y, *S, *keep;
    const float *dy, *dS;
    float *dq, *dk, *dv_, *dbeta;
    long nb, n, d, dv, C, chunks;
} DeltaProblem;

/* What each instruction set's kernel provides: the work of one item and the buffers it needs, no
 * threads. All memory comes from the caller's workspace (Python keeps it between calls), so a call
 * allocates nothing. A member's buffers (mem) are prepared once per run of the team, before its
 * first item: the items then rely on the zero padding, not on anything an earlier item left there. */
typedef struct {
    const char *name;
    /* the forward pass (_chunked_body.h): floats of a segment's state and of a member's buffers;
     * tokens [t0, t1) of sequence b, from (and moving) its state */
    long (*state_floats)(const Problem *p);
    long (*work_floats)(const Problem *p);
    void (*work_prepare)(const Problem *p, float *mem);
    void (*run)(const Problem *p, float *mem, int pass, long b, long t0, long t1, float *state);
    /* the non-causal form (_chunked_body.h), with the forward's buffers: pass 1 keys [t0, t1) into the
     * state, pass 2 queries [t0, t1) from it, pass 3 the whole sequence b */
    void (*noncausal_run)(const Problem *p, float *mem, int pass, long b, long t0, long t1, float *state);
    /* the backward pass (_chunked_back.h): floats of a member's buffers; the gradients of sequence b */
    long (*back_floats)(const Problem *p);
    void (*back_prepare)(const Problem *p, float *mem);
    void (*back_run)(const Problem *p, const Grads *g, float *mem, long b);
    /* the delta rule (_delta.h): floats of a member's buffers; the forward / backward of sequence b */
    long (*delta_floats)(const DeltaProblem *p, int backward);
    void (*delta_forward)(const DeltaProblem *p, float *mem, long b);
    void (*delta_backward)(const DeltaProblem *p, float *mem, long b);
} Kernel;

/* Rows of the products in the backward pass: all of k, or a triangular a (zero above or below its
 * diagonal), see gemm in _chunked_back.h. */
enum { FULL = 0, LOWER = 1, UPPER = 2 };

#define MAX_THREADS 64

/* The non-causal form writes an output of at least this many floats (16 MiB) past the cache (Work.stream):
 * more than the cache would keep for the next reader, and a line written whole need not be read first. */
#define NONCAUSAL_STREAM_FLOATS (4L << 20)

#define STR_(x) #x
#define STR(x) STR_(x)
#define FLOATS_64(n) (((n) + 15) / 16 * 16) /* n floats rounded up to whole 64-byte lines */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_KERNELS 1

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")
#define VL 16
#define NV_MAX 4
#define ISA avx512
#include "_chunked_body.h"
#include "_delta.h"
#include "_chunked_back.h"
#undef VL
#undef NV_MAX
#undef ISA
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define VL 8
#define NV_MAX 2
#define ISA avx2
#include "_chunked_body.h"
#include "_delta.h"
#include "_chunked_back.h"
#undef VL
#undef NV_MAX
#undef ISA
#pragma GCC pop_options

static int supported(const Kernel *k)
{
    __builtin_cpu_init();
    if (k == &kernel_avx512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("fma");
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static const Kernel *const KERNELS[] = {&kernel_avx512, &kernel_avx2};  /* best first */
#define N_KERNELS 2
#else
#define HAVE_KERNELS 0
static const Kernel *const KERNELS[] = {NULL};
#define N_KERNELS 0
static int supported(const Kernel *k) { (void)k; return 0; }
#endif

/* --- the thread team ---------------------------------------------------------------------------- */

/* One run of the team: the job, and the next unclaimed item. */
typedef struct {
    void (*start)(void *ctx, int member);
    void (*work)(void *ctx, int member, long item);
    void *ctx;
    long items;
    atomic_long next;
} Team;

typedef struct {
    Team *team;
    int id;
} Member;

static void *team_member(void *arg)
{
    Member *m = arg;
    Team *t = m->team;
    t->start(t->ctx, m->id);
    long i;
    while ((i = atomic_fetch_add(&t->next, 1)) < t->items) t->work(t->ctx, m->id, i);
    return NULL;
}

/* Does work(ctx, member, item) for every item in 0 .. items-1 with a team of `threads` members (no
 * more than MAX_THREADS, nor than items), member 0 being the calling thread; each member calls
 * start(ctx, member) before its first item. The members claim the items one at a time, so a thread
 * that cannot be started leaves its share to the others. Which member does an item depends on the
 * timing: work must give the same result whichever it is. Returns when every item is done. */
static void run_team(int threads, long items, void (*start)(void *ctx, int member),
                     void (*work)(void *ctx, int member, long item), void *ctx)
{
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > items) threads = items > 1 ? (int)items : 1;
    Team t = {.start = start, .work = work, .ctx = ctx, .items = items};
    atomic_store(&t.next, 0);
    pthread_t ids[MAX_THREADS];
    Member members[MAX_THREADS];
    int started = 0;
    for (int i = 0; i < threads; i++) members[i] = (Member){&t, i};
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&ids[started], NULL, team_member, &members[i]) != 0) break;
        started++;
    }
    team_member(&members[0]);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
}

/* --- the forward pass --------------------------------------------------------------------------- */

/* How a call is split: P segments of seg tokens per sequence, and where its memory goes. */
typedef struct {
    long P, seg;        /* segments per sequence; tokens per segment (a whole number of chunks) */
    int threads;        /* members of a team (this thread included) */
    long state_floats;  /* per segment: S, z */
    long work_floats;   /* per member */
} Plan;

static Plan plan(const Problem *p, const Kernel *kern, int threads)
{
    Plan pl = {.P = 1};
    if (p->nb < threads) pl.P = (threads + p->nb - 1) / p->nb;
    long chunks = (p->n + p->C - 1) / p->C;
    if (pl.P > chunks) pl.P = chunks;
    pl.seg = (chunks + pl.P - 1) / pl.P * p->C;
    pl.P = (p->n + pl.seg - 1) / pl.seg;
    long items = p->nb * pl.P;
    pl.threads = threads < items ? threads : (int)items;
    if (pl.threads > MAX_THREADS) pl.threads = MAX_THREADS;
    pl.state_floats = kern->state_floats(p);
    pl.work_floats = kern->work_floats(p);
    return pl;
}

/* The workspace a call needs: the states of all segments, then one block of buffers per member. */
static long workspace_floats(const Plan *pl, const Problem *p)
{
    return p->nb * pl->P * pl->state_floats + pl->threads * pl->work_floats;
}

/* One pass of the forward, as the team's job. */
typedef struct {
    const Problem *p;
    const Kernel *kern;
    const Plan *pl;
    int pass;       /* 1: segment states only; 2: outputs */
    float *states;  /* (nb * P, state_floats): the state each segment starts from */
    float *work;    /* (threads, work_floats) */
} Forward;

static void forward_start(void *ctx, int member)
{
    Forward *f = ctx;
    f->kern->work_prepare(f->p, f->work + member * f->pl->work_floats);
}

static void forward_item(void *ctx, int member, long i)
{
    Forward *f = ctx;
    const Plan *pl = f->pl;
    long b, s, slot;
    if (f->pass == 1) { /* item = (sequence, segment < P - 1): its state goes to the next slot */
        b = i / (pl->P - 1);
        s = i % (pl->P - 1);
        slot = b * pl->P + s + 1;
    } else {
        b = i / pl->P;
        s = i % pl->P;
        slot = b * pl->P + s;
    }
    long t0 = s * pl->seg, t1 = t0 + pl->seg < f->p->n ? t0 + pl->seg : f->p->n;
    f->kern->run(f->p, f->work + member * pl->work_floats, f->pass, b, t0, t1,
                 f->states + slot * pl->state_floats);
}

static void forward(const Problem *p, const Kernel *kern, const Plan *pl, float *workspace)
{
    Forward f = {.p = p, .kern = kern, .pl = pl, .states = workspace};
    f.work = workspace + p->nb * pl->P * pl->state_floats;
    memset(f.states, 0, (size_t)(p->nb * pl->P * pl->state_floats) * sizeof(float));
    if (pl->P > 1) {
        f.pass = 1;
        run_team(pl->threads, p->nb * (pl->P - 1), forward_start, forward_item, &f);
        for (long b = 0; b < p->nb; b++) /* slot s <- the state after segments 0 .. s-1 */
            for (long s = 2; s < pl->P; s++) {
                float *cur = f.states + (b * pl->P + s) * pl->state_floats, *prev = cur - pl->state_floats;
                for (long j = 0; j < pl->state_floats; j++) cur[j] += prev[j];
            }
    }
    f.pass = 2;
    run_team(pl->threads, p->nb * pl->P, forward_start, forward_item, &f);
}

/* --- the non-causal form ----------------------------------------------------------------------- */

/* Tokens per chunk of the non-causal form: the rows its features are computed for at a time (32: the
 * chunk's features and values stay in the first-level cache beside the state, and the next chunk's
 * inputs, asked for while this one multiplies, arrive in time; measured faster than 64 at N = 16,384). */
#define NONCAUSAL_C 32

/* How a non-causal call is split. With at least as many sequences as threads, one pass whose items are
 * whole sequences (the state of all keys, then every query). With fewer, two passes: Pk segments of
 * keys per sequence add to states of their own (summed per sequence in between), then Pq segments of
 * queries read the sum. Either way the members claim the items one at a time, so a member the machine
 * holds back leaves its share to the others. */
typedef struct {
    long Pk, Pq, seg_k, seg_q;
    int threads;
    long state_floats, work_floats;
} NcPlan;

static long segments(long n, long C, long want, long *seg)
{
    long chunks = (n + C - 1) / C, P = want < chunks ? want : chunks;
    if (P < 1) P = 1;
    *seg = (chunks + P - 1) / P * C;
    return (n + *seg - 1) / *seg;
}

static NcPlan nc_plan(const Problem *p, const Kernel *kern, int threads)
{
    NcPlan pl = {.Pk = 1, .Pq = 1, .seg_k = p->n, .seg_q = p->nq};
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (p->nb < threads) {
        long want = (2 * threads + p->nb - 1) / p->nb;  /* two items per member: room to even out */
        pl.Pk = segments(p->n, p->C, want, &pl.seg_k);
        pl.Pq = segments(p->nq, p->C, want, &pl.seg_q);
    }
    long items = p->nb * (pl.Pq > pl.Pk ? pl.Pq : pl.Pk);
    pl.threads = threads < items ? threads : (int)items;
    pl.state_floats = kern->state_floats(p);
    pl.work_floats = kern->work_floats(p);
    return pl;
}

static long nc_workspace_floats(const NcPlan *pl, const Problem *p)
{
    return p->nb * pl->Pk * pl->state_floats + pl->threads * pl->work_floats;
}

typedef struct {
    const Problem *p;
    const Kernel *kern;
    const NcPlan *pl;
    int pass;       /* 1: key segments; 2: query segments; 3: whole sequences */
    float *states;  /* (nb * Pk, state_floats) */
    float *work;    /* (threads, work_floats) */
} NonCausal;

static void nc_start(void *ctx, int member)
{
    NonCausal *f = ctx;
    f->kern->work_prepare(f->p, f->work + member * f->pl->work_floats);
}

static void nc_item(void *ctx, int member, long i)
{
    NonCausal *f = ctx;
    const NcPlan *pl = f->pl;
    float *mem = f->work + member * pl->work_floats;
    if (f->pass == 3) {
        f->kern->noncausal_run(f->p, mem, 3, i, 0, 0, f->states + i * pl->state_floats);
        return;
    }
    long P = f->pass == 1 ? pl->Pk : pl->Pq, seg = f->pass == 1 ? pl->seg_k : pl->seg_q;
    long n = f->pass == 1 ? f->p->n : f->p->nq, b = i / P, s = i % P;
    long t0 = s * seg, t1 = t0 + seg < n ? t0 + seg : n;
    float *state = f->states + (b * pl->Pk + (f->pass == 1 ? s : 0)) * pl->state_floats;
    f->kern->noncausal_run(f->p, mem, f->pass, b, t0, t1, state);
}

static void noncausal(const Problem *p, const Kernel *kern, const NcPlan *pl, float *workspace)
{
    NonCausal f = {.p = p, .kern = kern, .pl = pl, .states = workspace};
    f.work = workspace + p->nb * pl->Pk * pl->state_floats;
    memset(f.states, 0, (size_t)(p->nb * pl->Pk * pl->state_floats) * sizeof(float));
    if (pl->Pk == 1 && pl->Pq == 1) {
        f.pass = 3;
        run_team(pl->threads, p->nb, nc_start, nc_item, &f);
        return;
    }
    f.pass = 1;
    run_team(pl->threads, p->nb * pl->Pk, nc_start, nc_item, &f);
    for (long b = 0; b < p->nb; b++) /* slot 0 of each sequence <- the sum of its segments' states */
        for (long s = 1; s < pl->Pk; s++) {
            float *sum = f.states + b * pl->Pk * pl->state_floats, *part = sum + s * pl->state_floats;
            for (long j = 0; j < pl->state_floats; j++) sum[j] += part[j];
        }
    f.pass = 2;
    run_team(pl->threads, p->nb * pl->Pq, nc_start, nc_item, &f);
}

/* --- the backward pass -------------------------------------------------------------------------- */

/* The backward, as the team's job: one item per sequence. */
typedef struct {
    const Problem *p;
    const Kernel *kern;
    const Grads *g;
    float *work;  /* (threads, floats) */
    long floats;  /* back_floats: per member */
} Backward;

static void backward_start(void *ctx, int member)
{
    Backward *bw = ctx;
    bw->kern->back_prepare(bw->p, bw->work + member * bw->floats);
}

static void backward_item(void *ctx, int member, long b)
{
    Backward *bw = ctx;
    bw->kern->back_run(bw->p, bw->g, bw->work + member * bw->floats, b);
}

static void backward(const Problem *p, const Kernel *kern, const Grads *g, int threads, float *workspace)
{
    Backward bw = {.p = p, .kern = kern, .g = g, .work = workspace, .floats = kern->back_floats(p)};
    run_team(threads, p->nb, backward_start, backward_item, &bw);
}

/* --- the delta rule ---------------------------------------------------------------------------- */

/* One pass of the delta rule (forward or backward), as the team's job: one item per sequence. */
typedef struct {
    const DeltaProblem *p;
    const Kernel *kern;
    int backward;
    float *work;  /* (threads, floats) */
    long floats;  /* delta_floats: per member */
} DeltaJob;

static void delta_start(void *ctx, int member)
{
    (void)ctx;  /* every buffer is written before it is read: nothing to prepare */
    (void)member;
}

static void delta_item(void *ctx, int member, long b)
{
    DeltaJob *j = ctx;
    float *mem = j->work + member * j->floats;
    if (j->backward)
        j->kern->delta_backward(j->p, mem, b);
    else
        j->kern->delta_forward(j->p, mem, b);
}

/* --- Python ------------------------------------------------------------------------------------- */

static const Kernel *find_kernel(const char *name)
{
    for (int i = 0; i < N_KERNELS; i++)
        if ((!name || strcmp(name, KERNELS[i]->name) == 0) && supported(KERNELS[i])) return KERNELS[i];
    return NULL;
}

static PyObject *py_isas(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    PyObject *names = PyList_New(0);
    for (int i = 0; names && i < N_KERNELS; i++)
        if (supported(KERNELS[i])) {
            PyObject *s = PyUnicode_FromString(KERNELS[i]->name);
            if (!s || PyList_Append(names, s) < 0) Py_CLEAR(names);
            Py_XDECREF(s);
        }
    if (!names) return NULL;
    PyObject *tuple = PyList_AsTuple(names);
    Py_DECREF(names);
    return tuple;
}

/* Checks the sizes of a call and finds its kernel; on failure sets a ValueError and returns NULL. */
static const Kernel *problem_kernel(Py_ssize_t nb, Py_ssize_t n, Py_ssize_t d, Py_ssize_t dv, Py_ssize_t C,
                                    int threads, const char *isa)
{
    if (nb < 1 || n < 1 || d < 1 || dv < 1 || C < 1 || threads < 1) {
        PyErr_Format(PyExc_ValueError, "_chunked: bad sizes nb=%zd n=%zd d=%zd dv=%zd C=%zd threads=%d", nb,
                     n, d, dv, C, threads);
        return NULL;
    }
    const Kernel *kern = find_kernel(isa);
    if (!kern)
        PyErr_Format(PyExc_ValueError, "_chunked: instruction set %s is not available here", isa ? isa : "(any)");
    return kern;
}

/* threads that do work in the backward pass: one sequence each at a time */
static int back_threads(Py_ssize_t nb, int threads)
{
    int t = threads < MAX_THREADS ? threads : MAX_THREADS;
    return nb < t ? (int)nb : t;
}

/* Whether the caller's workspace holds the floats a call needs (else ValueError, 0). */
static int workspace_holds(Py_ssize_t ws_floats, long need)
{
    if (ws_floats >= need) return 1;
    PyErr_Format(PyExc_ValueError, "_chunked: the workspace holds %zd floats, the call needs %ld", ws_floats, need);
    return 0;
}

static PyObject *py_workspace(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t nb, n, d, dv, C;
    int threads, backward = 0;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "nnnnniz|p", &nb, &n, &d, &dv, &C, &threads, &isa, &backward)) return NULL;
    const Kernel *kern = problem_kernel(nb, n, d, dv, C, threads, isa);
    if (!kern) return NULL;
    Problem p = {.nb = nb, .n = n, .d = d, .dv = dv, .C = C < n ? C : n};
    if (backward) return PyLong_FromLong(back_threads(nb, threads) * kern->back_floats(&p));
    Plan pl = plan(&p, kern, threads);
    return PyLong_FromLong(workspace_floats(&pl, &p));
}

/* The feature map's code and eps of a call; on failure sets a ValueError and returns 0. */
static int good_phi_eps(int phi, float eps)
{
    if (phi >= 0 && phi < PHI_COUNT && eps >= 0.0f) return 1;
    PyErr_Format(PyExc_ValueError, "_chunked: bad feature map code %d or eps %g", phi, (double)eps);
    return 0;
}

static PyObject *py_forward(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long q, k, v, out, den, ws;
    Py_ssize_t nb, n, d, dv, C, ws_floats;
    int phi, threads;
    float eps;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "KKKKKnnnnnifizKn", &q, &k, &v, &out, &den, &nb, &n, &d, &dv, &C, &phi, &eps,
                          &threads, &isa, &ws, &ws_floats))
        return NULL;
    const Kernel *kern = problem_kernel(nb, n, d, dv, C, threads, isa);
    if (!kern) return NULL;
    if (!good_phi_eps(phi, eps)) return NULL;
    Problem p = {(const float *)(uintptr_t)q, (const float *)(uintptr_t)k, (const float *)(uintptr_t)v,
                 (float *)(uintptr_t)out, (float *)(uintptr_t)den, nb, n, d, dv, C < n ? C : n, phi, eps};
    Plan pl = plan(&p, kern, threads);
    if (!workspace_holds(ws_floats, workspace_floats(&pl, &p))) return NULL;
    Py_BEGIN_ALLOW_THREADS
    forward(&p, kern, &pl, (float *)(uintptr_t)ws);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_backward(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long q, k, v, dout, dq, dk, dvv, ws;
    Py_ssize_t nb, n, d, dv, C, ws_floats;
    int phi, normalize, threads;
    float eps;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "KKKKKKKnnnnnifpizKn", &q, &k, &v, &dout, &dq, &dk, &dvv, &nb, &n, &d, &dv, &C,
                          &phi, &eps, &normalize, &threads, &isa, &ws, &ws_floats))
        return NULL;
    const Kernel *kern = problem_kernel(nb, n, d, dv, C, threads, isa);
    if (!kern) return NULL;
    if (!good_phi_eps(phi, eps)) return NULL;
    Problem p = {(const float *)(uintptr_t)q, (const float *)(uintptr_t)k, (const float *)(uintptr_t)v, NULL,
                 NULL, nb, n, d, dv, C < n ? C : n, phi, eps};
    int team = back_threads(nb, threads);
    if (!workspace_holds(ws_floats, team * kern->back_floats(&p))) return NULL;
    Grads g = {(const float *)(uintptr_t)dout, (float *)(uintptr_t)dq, (float *)(uintptr_t)dk,
               (float *)(uintptr_t)dvv, normalize};
    Py_BEGIN_ALLOW_THREADS
    backward(&p, kern, &g, team, (float *)(uintptr_t)ws);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* The sizes of a non-causal call as a Problem (C = NONCAUSAL_C, at most the keys), its kernel, its plan. */
static const Kernel *nc_problem(Problem *p, NcPlan *pl, Py_ssize_t nb, Py_ssize_t nq, Py_ssize_t nk, Py_ssize_t d,
                                Py_ssize_t dv, int threads, const char *isa)
{
    if (nq < 1) {
        PyErr_Format(PyExc_ValueError, "_chunked: bad sizes nq=%zd", nq);
        return NULL;
    }
    const Kernel *kern = problem_kernel(nb, nk, d, dv, NONCAUSAL_C, threads, isa);
    if (!kern) return NULL;
    p->nb = nb, p->n = nk, p->nq = nq, p->d = d, p->dv = dv, p->C = NONCAUSAL_C;
    *pl = nc_plan(p, kern, threads);
    return kern;
}

static PyObject *py_noncausal_workspace(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t nb, nq, nk, d, dv;
    int threads;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "nnnnniz", &nb, &nq, &nk, &d, &dv, &threads, &isa)) return NULL;
    Problem p = {0};
    NcPlan pl;
    if (!nc_problem(&p, &pl, nb, nq, nk, d, dv, threads, isa)) return NULL;
    return PyLong_FromLong(nc_workspace_floats(&pl, &p));
}

static PyObject *py_noncausal(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long q, k, v, out, den, ws;
    Py_ssize_t nb, nq, nk, d, dv, ws_floats;
    int phi, threads;
    float eps;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "KKKKKnnnnnifizKn", &q, &k, &v, &out, &den, &nb, &nq, &nk, &d, &dv, &phi, &eps,
                          &threads, &isa, &ws, &ws_floats))
        return NULL;
    Problem p = {0};
    NcPlan pl;
    const Kernel *kern = nc_problem(&p, &pl, nb, nq, nk, d, dv, threads, isa);
    if (!kern) return NULL;
    if (!good_phi_eps(phi, eps)) return NULL;
    p.q = (const float *)(uintptr_t)q, p.k = (const float *)(uintptr_t)k, p.v = (const float *)(uintptr_t)v;
    p.out = (float *)(uintptr_t)out, p.den = (float *)(uintptr_t)den, p.phi = phi, p.eps = eps;
    if (!workspace_holds(ws_floats, nc_workspace_floats(&pl, &p))) return NULL;
    Py_BEGIN_ALLOW_THREADS
    noncausal(&p, kern, &pl, (float *)(uintptr_t)ws);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* The sizes of a delta call, and the floats its team needs (team * per member); NULL on failure. */
static const Kernel *delta_problem(DeltaProblem *p, Py_ssize_t nb, Py_ssize_t n, Py_ssize_t d, Py_ssize_t dv,
                                   Py_ssize_t C, int threads, const char *isa, int backward, long *floats)
{
    const Kernel *kern = problem_kernel(nb, n, d, dv, C, threads, isa);
    if (!kern) return NULL;
    p->nb = nb, p->n = n, p->d = d, p->dv = dv, p->C = C < n ? C : n;
    p->chunks = (n + p->C - 1) / p->C;
    *floats = back_threads(nb, threads) * kern->delta_floats(p, backward);
    return kern;
}

static PyObject *py_delta_workspace(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t nb, n, d, dv, C;
    int threads, backward = 0;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "nnnnniz|p", &nb, &n, &d, &dv, &C, &threads, &isa, &backward)) return NULL;
    DeltaProblem p = {0};
    long floats;
    if (!delta_problem(&p, nb, n, d, dv, C, threads, isa, backward, &floats)) return NULL;
    return PyLong_FromLong(floats);
}

/* Runs one pass of the delta rule with the caller's workspace; NULL (ValueError) if it is too small. */
static PyObject *delta_run(const DeltaProblem *p, const Kernel *kern, int threads, int backward, float *ws,
                           Py_ssize_t ws_floats, long floats)
{
    if (!workspace_holds(ws_floats, floats)) return NULL;
    DeltaJob j = {.p = p, .kern = kern, .backward = backward, .work = ws,
                  .floats = kern->delta_floats(p, backward)};
    Py_BEGIN_ALLOW_THREADS
    run_team(back_threads(p->nb, threads), p->nb, delta_start, delta_item, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_delta_forward(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long q, k, v, beta, y, S, keep, ws;
    Py_ssize_t nb, n, d, dv, C, ws_floats;
    int threads;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "KKKKKKKnnnnnizKn", &q, &k, &v, &beta, &y, &S, &keep, &nb, &n, &d, &dv, &C,
                          &threads, &isa, &ws, &ws_floats))
        return NULL;
    DeltaProblem p = {(const float *)(uintptr_t)q, (const float *)(uintptr_t)k, (const float *)(uintptr_t)v,
                      (const float *)(uintptr_t)beta, (float *)(uintptr_t)y, (float *)(uintptr_t)S,
                      (float *)(uintptr_t)keep};
    long floats;
    const Kernel *kern = delta_problem(&p, nb, n, d, dv, C, threads, isa, 0, &floats);
    if (!kern) return NULL;
    return delta_run(&p, kern, threads, 0, (float *)(uintptr_t)ws, ws_floats, floats);
}

static PyObject *py_delta_backward(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long q, k, v, beta, keep, dy, dS, dq, dk, dvv, dbeta, ws;
    Py_ssize_t nb, n, d, dv, C, ws_floats;
    int threads;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "KKKKKKKKKKKnnnnnizKn", &q, &k, &v, &beta, &keep, &dy, &dS, &dq, &dk, &dvv,
                          &dbeta, &nb, &n, &d, &dv, &C, &threads, &isa, &ws, &ws_floats))
        return NULL;
    if (!keep) {
        PyErr_SetString(PyExc_ValueError, "_chunked: the delta rule's backward needs the states its forward kept");
        return NULL;
    }
    DeltaProblem p = {(const float *)(uintptr_t)q, (const float *)(uintptr_t)k, (const float *)(uintptr_t)v,
                      (const float *)(uintptr_t)beta, NULL, NULL, (float *)(uintptr_t)keep,
                      (const float *)(uintptr_t)dy, (const float *)(uintptr_t)dS, (float *)(uintptr_t)dq,
                      (float *)(uintptr_t)dk, (float *)(uintptr_t)dvv, (float *)(uintptr_t)dbeta};
    long floats;
    const Kernel *kern = delta_problem(&p, nb, n, d, dv, C, threads, isa, 1, &floats);
    if (!kern) return NULL;
    return delta_run(&p, kern, threads, 1, (float *)(uintptr_t)ws, ws_floats, floats);
}

static PyMethodDef methods[] = {
    {"isas", py_isas, METH_NOARGS, "isas() -> the instruction sets this CPU can run, best first."},
    {"workspace", py_workspace, METH_VARARGS,
     "workspace(nb, n, d, dv, C, threads, isa, backward=False) -> the float32 workspace forward (or\n"
     "backward) needs, in floats."},
    {"forward", py_forward, METH_VARARGS,
     "forward(q, k, v, out, den, nb, n, d, dv, C, phi, eps, threads, isa, workspace, workspace_floats):\n"
     "addresses of contiguous float32 buffers; writes out and den. Call it through linattn_core.fast.kernel,\n"
     "which checks the tensors behind the addresses."},
    {"backward", py_backward, METH_VARARGS,
     "backward(q, k, v, dout, dq, dk, dv, nb, n, d, dv, C, phi, eps, normalize, threads, isa, workspace,\n"
     "workspace_floats): addresses of contiguous float32 buffers; writes the gradients dq, dk, dv of causal\n"
     "linear attention. Call it through linattn_core.fast.kernel, which checks the tensors."},
    {"noncausal_workspace", py_noncausal_workspace, METH_VARARGS,
     "noncausal_workspace(nb, nq, nk, d, dv, threads, isa) -> the float32 workspace noncausal needs, in floats."},
    {"noncausal", py_noncausal, METH_VARARGS,
     "noncausal(q, k, v, out, den, nb, nq, nk, d, dv, phi, eps, threads, isa, workspace, workspace_floats):\n"
     "non-causal linear attention, q: (nb, nq, d), k: (nb, nk, d), v: (nb, nk, dv); writes out and den. Call it\n"
     "through linattn_core.fast.kernel, which checks the tensors behind the addresses."},
    {"delta_workspace", py_delta_workspace, METH_VARARGS,
     "delta_workspace(nb, n, d, dv, C, threads, isa, backward=False) -> the float32 workspace the delta\n"
     "rule's forward (or backward) needs, in floats."},
    {"delta_forward", py_delta_forward, METH_VARARGS,
     "delta_forward(q, k, v, beta, y, S, keep, nb, n, d, dv, C, threads, isa, workspace, workspace_floats):\n"
     "addresses of contiguous float32 buffers (keep 0: no states kept); writes y, S and keep. Call it through\n"
     "linattn_core.fast.kernel, which checks the tensors."},
    {"delta_backward", py_delta_backward, METH_VARARGS,
     "delta_backward(q, k, v, beta, keep, dy, dS, dq, dk, dv, dbeta, nb, n, d, dv, C, threads, isa, workspace,\n"
     "workspace_floats): addresses (dS 0: zero); writes the gradients of the delta rule. Call it through\n"
     "linattn_core.fast.kernel, which checks the tensors."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_chunked",
    .m_doc = "The fused chunked form of causal linear attention (float32, CPU).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__chunked(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "PHI_IDENTITY", PHI_IDENTITY) < 0 ||
              PyModule_AddIntConstant(m, "PHI_RELU", PHI_RELU) < 0 ||
              PyModule_AddIntConstant(m, "PHI_ELU1", PHI_ELU1) < 0))
        Py_CLEAR(m);
    return m;
}
