// variants.h — the wrong students: each one edit of the reference labs/ (test_variants.c grades
// them: each loses exactly the points of the checks its mistake breaks; test_todo.c runs the
// check of the TODO region each edit falls in: it fails, naming where).
//
// Defines: Variant, VARIANTS, replace_once(), variant_copy() (after labtest.h).
#ifndef SHARDLAB_TEST_VARIANTS_H
#define SHARDLAB_TEST_VARIANTS_H

typedef struct {
    const char *name, *file, *old, *new_text;
    const char *labs;       // the labs to build
    const char *only;       // the graded configurations
    // The checks that must fail, in rubric order, per graded configuration: "label=a,b" items
    // separated by spaces, "*" for every configuration not named; a configuration named with
    // nothing after '=', or not named when there is no "*", must score full marks.
    const char *breaks;
    const char *at_length;      // the configurations graded again at 1000 steps (NULL: none)
    const char *length_breaks;  // what must fail there (NULL: the same as breaks)
} Variant;

static const Variant VARIANTS[] = {
    // ---- the first five -------------------------------------------------------------------
    {"ring all-gather with the wrong chunk index", "03-collectives/ring.c",
     "if ((m = piece(n, p, mod(r - k + 1, p), i, &off)) == 0) continue;",
     "if ((m = piece(n, p, mod(r - k, p), i, &off)) == 0) continue;", "ddp", "ddp",
     "*=replicas.equal,loss.reference,grads.reference", NULL, NULL},
    {"DDP without gradient averaging", "05-ddp/ddp.c", "(float)(1.0 / L.tokens_per_step), &spans,",
     "(float)(1.0 * N / L.tokens_per_step), &spans,", "ddp", "ddp", "*=grads.reference", "ddp-accum",
     "*=loss.reference,grads.reference"},
    {"ZeRO's shard one element too long", "08-zero/sharded.c",
     "s->shard[u] = (per_rank + (size_t)align - 1) / (size_t)align * (size_t)align;",
     "s->shard[u] = (per_rank + (size_t)align - 1) / (size_t)align * (size_t)align + 1;", "zero,fsdp", "zero,fsdp",
     "*=mem.formula,comm.bytes", "zero-2", NULL},
    {"1F1B with one forward too many before the first backward", "12-pp/schedule.c",
     "int warmup = pp->sched == SCHED_GPIPE ? m : (p - s - 1 < m ? p - s - 1 : m);",
     "int warmup = pp->sched == SCHED_GPIPE ? m : (p - s < m ? p - s : m);", "pp", "pp-1f1b", "*=schedule.in_flight",
     NULL, NULL},
    {"recomputation in the wrong order (each block reads a stale input)", "14-activation-checkpointing/activation_checkpointing.c",
     "for (int j = p->first[i]; j <= l; j++) {", "for (int j = l; j >= p->first[i]; j--) {", "ckpt", "ckpt",
     "*=loss.reference,recompute.bitwise", NULL, NULL},

    // ---- memory too high only at the peak: the steady state is right ------------------------
    {"ZeRO-2/3 reduce-scattering every unit's gradient only after the whole backward pass", "08-zero/zero.c",
     "    sharded_reduce_gradient(z->group, z->prec, z->mem, g32, z->grads[u], full, u);\n"
     "    mem_free(z->mem, g32);\n}",
     "    static float *pending[64];  // every unit's full gradient, until the backward pass ends\n"
     "    pending[u] = g32;\n"
     "    (void)full;\n"
     "    if (u > 0) return;\n"
     "    for (int v = z->lay.units - 1; v >= 0; v--) {\n"
     "        sharded_reduce_gradient(z->group, z->prec, z->mem, pending[v], z->grads[v], shard_padded(&z->lay, v), v);\n"
     "        mem_free(z->mem, pending[v]);\n"
     "    }\n}",
     "zero", "zero", "zero-1= zero-2=mem.formula zero-3=mem.formula", NULL, NULL},
    {"FSDP freeing each unit's gathered weights one unit late in the backward pass", "09-fsdp/fsdp.c",
     "            unit_reshard(f, u);\n            sharded_reduce_gradient(",
     "            if (u + 1 < f->lay.units) unit_reshard(f, u + 1);  // the unit above, one late\n"
     "            if (u == 0) unit_reshard(f, 0);\n"
     "            sharded_reduce_gradient(",
     "fsdp", "fsdp", "*=mem.formula", NULL, NULL},

    // ---- a mistake in an option: only the configuration that runs it catches it --------------
    {"--accum: each micro-batch's loss weighted as a whole batch's", "05-ddp/ddp.c", "(float)(1.0 / L.tokens_per_step), &spans,",
     "(float)(a.accum / L.tokens_per_step), &spans,", "ddp", "ddp", "ddp-accum=grads.reference", NULL, NULL},
    {"--accum: rank r's sequences start at r x the micro-batch, not r x its share", "05-ddp/ddp.c",
     "step, rank * per_rank, per_rank,", "step, rank * micro, per_rank,", "ddp", "ddp",
     "ddp-accum=loss.reference,grads.reference", NULL, NULL},
    {"--prefetch two units ahead", "09-fsdp/fsdp.c", "            if (f->prefetch && u + 1 < U) unit_start_gather(f, u + 1);",
     "            for (int v = u + 1; f->prefetch && v <= u + 2 && v < U; v++) unit_start_gather(f, v);", "fsdp", "fsdp",
     "fsdp-prefetch=mem.formula", NULL, NULL},
    {"--prefetch forgotten in the backward pass", "09-fsdp/fsdp.c",
     "            if (f->prefetch && u > 0) unit_start_gather(f, u - 1);\n", "", "fsdp", "fsdp",
     "fsdp-prefetch=comm.bytes", NULL, NULL},
    {"--sp: g forward all-reduced, then the rank's own rows kept", "10-tp/f_and_g.c",
     "row-parallel linear (SP: reduce-scatter) */\n"
     "    size_t n = (size_t)tp->BT * tp->cfg.dim;\n"
     "    if (tp->sp) dist_reduce_scatter(tp->group, in, out, n);\n"
     "    else dist_all_reduce(tp->group, in, n);",
     "row-parallel linear (SP: reduce-scatter) */\n"
     "    size_t n = (size_t)tp->BT * tp->cfg.dim;\n"
     "    dist_all_reduce(tp->group, in, n);\n"
     "    if (tp->sp) tp->ops->copy(out, in + (size_t)tp->row0 * tp->cfg.dim, (size_t)tp->rows * tp->cfg.dim);",
     "tp", "tp", "tp-sp=comm.bytes", NULL, NULL},
    {"--sp: the replicated parameters' gradients never summed over the group", "10-tp/tp.c",
     "        if (sp) all_reduce_gradients(&tp, &tp_group, \"tp\", \"replicated_grads\", 0, &rep_count);\n", "", "tp",
     "tp", "tp-sp=loss.reference,grads.reference,comm.bytes", NULL, NULL},

    // ---- data sharding: graded on what each rank read and trained on --------------------------
    {"a sampler whose ranks' parts overlap (rank r starts at position r of each batch)", "04-data-sharding/shard.c",
     "L->order[b * L->B + shard_first(L, L->rank) + j]", "L->order[b * L->B + L->rank + j]", "shard", "shard",
     "*=loss.reference,data.coverage", NULL, NULL},
    {"a sampler that reads every global batch whole and keeps its part", "04-data-sharding/shard.c",
     "        for (int64_t b = 0, k = 0; b < L->E; b++)\n"
     "            for (int j = 0; j < L->per_rank; j++, k++)\n"
     "                dataset_read(&L->ds, L->order[b * L->B + shard_first(L, L->rank) + j], 1, L->mine + k * L->S);\n",
     "        uint8_t *whole = malloc_check((size_t)L->B * (size_t)L->S);\n"
     "        for (int64_t b = 0, k = 0; b < L->E; b++) {\n"
     "            for (int i = 0; i < L->B; i++) dataset_read(&L->ds, L->order[b * L->B + i], 1, whole + (size_t)i * L->S);\n"
     "            for (int j = 0; j < L->per_rank; j++, k++)\n"
     "                memcpy(L->mine + k * L->S, whole + (size_t)(shard_first(L, L->rank) + j) * L->S, (size_t)L->S);\n"
     "        }\n"
     "        free(whole);\n",
     "shard", "shard", "*=data.coverage", NULL, NULL},

    // ---- correct but wasteful: right numbers, bytes the algorithm does not send ----------------
    {"ZeRO-1 completing the all-reduce (the summed gradients all-gathered too, as in DDP)", "08-zero/zero.c",
     "        if (z->stage == 0) sharded_all_gather(",
     "        if (z->stage <= 1) sharded_all_gather(", "zero", "zero", "zero-1=comm.bytes", NULL, NULL},
    {"FSDP gathering each unit's summed gradient back (and never using it)", "09-fsdp/fsdp.c",
     "shard_padded(&f->lay, u), u);\n            mem_free(f->mem, g32);",
     "shard_padded(&f->lay, u), u);\n"
     "            sharded_all_gather(f->group, f->prec, f->unit[u].grad_shard, g32, shard_padded(&f->lay, u), u, NULL);\n"
     "            mem_free(f->mem, g32);",
     "fsdp", "fsdp", "*=comm.bytes", NULL, NULL},
    {"ZeRO all-reducing the loss once more, to see that the ranks agree (the sum unused)", "08-zero/zero.c",
     "        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;\n",
     "        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;\n"
     "        float agree[1] = {(float)loss};\n"
     "        dist_all_reduce(&L.dist.world_group, agree, 1);\n",
     "zero", "zero", "*=comm.bytes", NULL, NULL},

    // ---- the optimizer: every reference run steps AdamW too --------------------------------------
    {"AdamW with coupled (L2) weight decay", "common/model/adamw.c",
     "        float g = grads[i];\n"
     "        m[i] = b1 * m[i] + (1.0f - b1) * g;\n"
     "        v[i] = b2 * v[i] + (1.0f - b2) * g * g;\n"
     "        float mhat = m[i] / c1, vhat = v[i] / c2;\n"
     "        params[i] -= opt->lr * (mhat / (sqrtf(vhat) + opt->eps) + opt->weight_decay * params[i]);\n",
     "        float g = grads[i] + opt->weight_decay * params[i];  // Adam's L2: the decay joins the gradient\n"
     "        m[i] = b1 * m[i] + (1.0f - b1) * g;\n"
     "        v[i] = b2 * v[i] + (1.0f - b2) * g * g;\n"
     "        float mhat = m[i] / c1, vhat = v[i] / c2;\n"
     "        params[i] -= opt->lr * mhat / (sqrtf(vhat) + opt->eps);\n",
     "single", "single", "*=loss.reference", NULL, NULL},

    // ---- the grader's blind spots, each closed by a configuration or a check of its own ---------
    // Uneven chunks: every bucket, shard and TP buffer of the graded runs divides by its world;
    // only collectives-ring-n3 (3 ranks, sizes of 2^k floats) gives the ring chunks of two lengths.
    {"ring reduce-scatter adding at chunk c's offset c n/p (right only when p divides n)", "03-collectives/ring.c",
     "            const float *partial = shm_peek(s, left, m);\n"
     "            add_words(t, shm_reserve(s, right), partial, in + off, m);",
     "            const float *partial = shm_peek(s, left, m);\n"
     "            size_t mine = (size_t)mod(r - k, p) * (n / p) + i * SHM_PIECE_FLOATS;  // chunk c starts at c n/p\n"
     "            add_words(t, shm_reserve(s, right), partial, in + mine, m);",
     "collectives", "collectives", "collectives= collectives-ring-n3=collectives.correct", NULL, NULL},
    // Fewer micro-batches than stages: only pp-1f1b-m2 has a stage whose bound is p - s < m.
    {"1F1B forwarding every micro-batch first when there are fewer than stages (m < p, not m < p - s)",
     "12-pp/schedule.c", "int warmup = pp->sched == SCHED_GPIPE ? m : (p - s - 1 < m ? p - s - 1 : m);",
     "int warmup = pp->sched == SCHED_GPIPE || m < p ? m : p - s - 1;", "pp", "pp-1f1b,pp-1f1b-m2,pp-1f1b-m1",
     "pp-1f1b= pp-1f1b-m1= pp-1f1b-m2=schedule.in_flight", NULL, NULL},
    // Memory too high after every step: the labs' own tables warn and go on; mem.formula judges.
    {"ZeRO-1 keeping AdamW's m and v for the whole unit (only its slice updated)", "08-zero/sharded.c",
     "        o->m[u] = mem_alloc_floats(where, MEM_OPTIM, n, \"AdamW first moment\");\n"
     "        o->v[u] = mem_alloc_floats(where, MEM_OPTIM, n, \"AdamW second moment\");",
     "        o->m[u] = mem_alloc_floats(where, MEM_OPTIM, shard_padded(lay, u), \"AdamW first moment\");  // as DDP's\n"
     "        o->v[u] = mem_alloc_floats(where, MEM_OPTIM, shard_padded(lay, u), \"AdamW second moment\");",
     "zero", "zero-1", "zero-1=mem.formula", NULL, NULL},
    {"--policy sqrt keeping every block's activations (recomputed into them all the same)",
     "14-activation-checkpointing/activation_checkpointing.c",
     "        if (i < 0) gpt_carve_block(b, k, c, B);  // kept whole\n"
     "        else *b = slot[l - p->first[i]];\n"
     "        if (i < 0 || l == p->last[i]) b->out = gpt_carve_floats(k, BTC);  // kept: the next layer's input\n",
     "        gpt_carve_block(b, k, c, B);  // every block kept whole, checkpointed in segment i or not\n"
     "        b->out = gpt_carve_floats(k, BTC);\n"
     "        (void)i;\n",
     "ckpt", "ckpt", "*=mem.formula", NULL, NULL},
    // Fewer bytes: comm.bytes says which way a rank is off.
    {"ZeRO summing the loss with an all-reduce of one float, as PyTorch's all_reduce(loss)", "08-zero/zero.c",
     "        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;\n",
     "        float summed[1] = {(float)loss_sum};\n"
     "        dist_all_reduce(&L.dist.world_group, summed, 1);\n"
     "        double loss = summed[0] / L.tokens_per_step;\n",
     "zero", "zero-1", "zero-1=comm.bytes", NULL, NULL},
    // AdamW's eps inside the square root: sqrt(vhat + 1e-8) is never below 1e-4, so a parameter
    // whose gradient is 1e-6 moves 100 times too little; those of gradients of 0.01 and more
    // move as they should. What it breaks is measured: single's loss, ZeRO-1's loss and norm.
    {"AdamW with eps inside the square root", "common/model/adamw.c",
     "params[i] -= opt->lr * (mhat / (sqrtf(vhat) + opt->eps) + opt->weight_decay * params[i]);",
     "params[i] -= opt->lr * (mhat / sqrtf(vhat + opt->eps) + opt->weight_decay * params[i]);", "single,zero", "single,zero-1",
     "single=loss.reference zero-1=loss.reference,grads.reference", NULL, NULL},
    // ---- HSDP (fsdp --replicate R): the two levels of the reduction -------------------------
    {"HSDP without the sum across replicas (each replica steps on its own data's gradient)", "09-fsdp/fsdp.c",
     "        sharded_all_gather(f->replicas, f->prec, piece, f->unit[u].grad_shard, s, SHARDED_REPLICA_TAG + u, NULL);\n",
     "        (void)s;\n", "fsdp", "fsdp", "hsdp=loss.reference,grads.reference,comm.bytes fsdp= fsdp-prefetch=", NULL, NULL},
    {"HSDP's gradient norm reduced over the whole world (counted once per replica)", "09-fsdp/fsdp.c",
     "sharded_adamw_step(&adam, &shard_group,", "sharded_adamw_step(&adam, &L.dist.world_group,", "fsdp", "fsdp",
     "hsdp=grads.reference,comm.bytes fsdp= fsdp-prefetch=", NULL, NULL},
    {"HSDP scaling the loss by its replica's batch (a mean per replica, then summed across replicas)", "09-fsdp/fsdp.c",
     "forward_backward(&f, &batch, step, (float)(1.0 / L.tokens_per_step));",
     "forward_backward(&f, &batch, step, (float)((double)R / L.tokens_per_step));", "fsdp", "fsdp",
     "hsdp=grads.reference fsdp= fsdp-prefetch=", NULL, NULL},
    {"HSDP replicas reading the same sequences (the batch split over a shard group, not the world)", "09-fsdp/fsdp.c",
     "Batch batch = {&L.corpus, &a, &acts, log, rank * per_rank, per_rank, 0};",
     "Batch batch = {&L.corpus, &a, &acts, log, shard_rank * per_rank, per_rank, 0};", "fsdp", "fsdp",
     "hsdp=loss.reference,grads.reference fsdp= fsdp-prefetch=", NULL, NULL},

    // ---- context parallelism (cp): the layout, the merge, the ring, the positions -----------
    // A zig-zag that still covers the sequence trains as well: only layout.positions sees it.
    {"cp's zig-zag giving rank r chunks r and N+r (not its mirror 2N-1-r)", "18-cp/ring_attention.c",
     "chunk[1] = 2 * l->N - 1 - r;  // its mirror", "chunk[1] = l->N + r;  // its mirror", "cp", "cp",
     "cp=layout.positions cp-n2=layout.positions cp-contiguous-n3=", NULL, NULL},
    {"ring attention's merge weighting a block's unnormalized sum (ob, not ob / l)", "18-cp/ring_attention.c",
     "w_new = expf(lb - merged) / l;", "w_new = expf(lb - merged);", "cp", "cp", "*=loss.reference,grads.reference", NULL,
     NULL},
    {"the forward ring stopping a hand-over early (the last block never arrives)", "18-cp/ring_attention.c",
     "        if (s < N - 1) {  // posted", "        if (s < N - 2) {  // posted", "cp", "cp",
     "*=loss.reference,grads.reference,comm.bytes", NULL, NULL},
    {"cp's position embeddings looked up at the rank's own indices, not the global positions", "18-cp/cp.c",
     "w.wpe + (size_t)cp->pos[i] * C, C);", "w.wpe + (size_t)i * C, C);", "cp", "cp",
     "*=loss.reference,grads.reference", NULL, NULL},
    {"ring attention's causal mask by the query's index on its rank, not its position", "18-cp/ring_attention.c",
     "int nk = visible_keys(kpos, Tk, qpos[t]);\n                if (nk == 0) continue;  // the whole block",
     "int nk = visible_keys(kpos, Tk, t);\n                if (nk == 0) continue;  // the whole block", "cp", "cp",
     "*=loss.reference,grads.reference", NULL, NULL},
    // ---- expert parallelism (ep): the gradients, the capacity rule, the combine, the norm ----
    // A DDP reflex: all-reduce every gradient. Rank r's experts then get other ranks' experts'
    // gradients added (the same offsets hold other experts), and each expert's own is already whole.
    {"ep all-reducing every gradient, the experts' too", "19-ep/ep.c",
     "dist_all_reduce_start(g, model->grads[l], replicated_floats(&model->cfg, l), l, &w);",
     "dist_all_reduce_start(g, model->grads[l], gpt_layer_size(&model->cfg, l), l, &w);", "ep", "ep",
     "*=loss.reference,grads.reference,comm.bytes", NULL, NULL},
    // Each rank fills each expert to its own share of the capacity: other drops than single's.
    {"ep's capacity applied per rank to its own tokens, not over the pass", "19-ep/dispatch.c",
     "int K = m->K, E = m->E, cap = moe_capacity(m, n * N), dropped = 0;\n"
     "    for (int e = 0; e < E; e++) {\n"
     "        int taken = 0;  // of e's capacity, by the blocks before: (choice, rank) in that order\n"
     "        for (int k = 0; k < K; k++)\n"
     "            for (int s = 0; s < n; s++) {\n"
     "                int i = (s * K + k) * E + e, room = cap - taken, c = counts[i];\n"
     "                served[i] = c < room ? c : room;\n"
     "                taken += served[i];",
     "int K = m->K, E = m->E, cap = moe_capacity(m, N), dropped = 0;  // a rank's tokens, its capacity\n"
     "    for (int e = 0; e < E; e++) {\n"
     "        int taken[MOE_MAX_RANKS] = {0};  // of e's capacity on each rank\n"
     "        for (int k = 0; k < K; k++)\n"
     "            for (int s = 0; s < n; s++) {\n"
     "                int i = (s * K + k) * E + e, room = cap - taken[s], c = counts[i];\n"
     "                served[i] = c < room ? c : room;\n"
     "                taken[s] += served[i];",
     "ep", "ep", "ep= ep-n2= ep-capacity=loss.reference,grads.reference,experts.routing "
     "ep-capacity-n2=loss.reference,grads.reference,experts.routing", NULL, NULL},
    // As many drops, other tokens: rank 0's second choices before rank 1's first.
    {"ep's capacity serving by rank first, not first choices first", "19-ep/dispatch.c",
     "        for (int k = 0; k < K; k++)\n            for (int s = 0; s < n; s++) {\n                int i = (s * K + k) * E + e, room",
     "        for (int s = 0; s < n; s++)\n            for (int k = 0; k < K; k++) {\n                int i = (s * K + k) * E + e, room",
     "ep", "ep", "ep= ep-n2= ep-capacity=loss.reference,grads.reference ep-capacity-n2=loss.reference,grads.reference",
     NULL, NULL},
    {"the experts' outputs summed into the token unweighted by the router", "common/model/moe.c",
     "for (int c = 0; c < C; c++) o[c] += w * y[c];", "for (int c = 0; c < C; c++) o[c] += y[c];\n            (void)w;",
     "ep", "ep", "*=loss.reference,grads.reference", NULL, NULL},
    {"the top-K router's weights not renormalised over the chosen experts", "common/model/moe.c",
     "for (int k = 0; k < m->K; k++) weight[k] = (float)(p[expert[k]] / sum);",
     "for (int k = 0; k < m->K; k++) weight[k] = p[expert[k]];\n    (void)sum;", "ep", "ep",
     "*=loss.reference,grads.reference", NULL, NULL},
    // Each rank clips by its own norm: the replicated weights part ways at the first clip, by
    // little, as AdamW's update hardly depends on the gradient's scale (the loss holds).
    {"ep's gradient norm leaving out the other ranks' experts", "19-ep/ep.c",
     "return sqrt(rep + dist_sum_over_ranks(g, mine));", "(void)g;\n    return sqrt(rep + mine);", "ep", "ep",
     "*=replicas.equal,grads.reference,comm.bytes", NULL, NULL},
    // ---- all-to-all: each block to the wrong rank (on 2 ranks r + k and r - k would be one) ----
    {"all-to-all sending rank r+k the block meant for rank r-k", "03-collectives/pairwise.c",
     "memcpy(shm_reserve(s, g->ranks[to]), in + send_at[to] + at, m * sizeof(float));",
     "memcpy(shm_reserve(s, g->ranks[to]), in + send_at[from] + at, m * sizeof(float));", "collectives",
     "collectives,collectives-ring-n3", "*=collectives.correct", NULL, NULL},
};

// Replaces the one occurrence of `old` in path by `new_text`; 0 if old is not there exactly once.
static int replace_once(const char *path, const char *old, const char *new_text) {
    char *text = read_file(path, NULL);
    char *at = text ? strstr(text, old) : NULL;
    if (!at || strstr(at + 1, old)) return free(text), 0;
    return splice_file(path, text, at, strlen(old), new_text);
}

// The wrong student x as a copy of the reference: ref_src (a copy of labs/) into tmp/<tag>/labs,
// with x's edit made, and ref_build into tmp/build-<tag> (timestamps kept, so a build there
// compiles only the file the edit changed); their paths into src and bdir (n bytes each). 1 if
// the edit applied (its text was there once).
static int variant_copy(const Variant *x, const char *tag, const char *ref_src, const char *ref_build, char *src,
                        char *bdir, size_t n) {
    char path[1200];
    snprintf(src, n, "%s/%s/labs", tmp, tag);
    snprintf(bdir, n, "%s/build-%s", tmp, tag);
    sh("mkdir -p %s/%s && cp -rp %s %s/%s/ && cp -rp %s %s", tmp, tag, ref_src, tmp, tag, ref_build, bdir);
    snprintf(path, sizeof path, "%s/%s", src, x->file);
    return replace_once(path, x->old, x->new_text);
}

#endif
