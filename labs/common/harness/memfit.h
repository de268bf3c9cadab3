// memfit.h — the memory a run will hold, worked out from its options before anything is
// allocated, and the check that refuses a run the machine cannot hold.
//
// A model inside the options' bounds (--dim 16384 --layers 256: 3.3 TB of weights) would
// otherwise be allocated until the kernel kills the rank. Every training lab calls
// memfit_check_rank() once it knows its device and before its first allocation, and the web
// server calls memfit_need_options() before it starts a run: one estimate, from the formulas
// each lab is graded against (train.h's acts formula, DDP's 16 Psi, ZeRO's and FSDP's 1/N,
// TP's 1/t, PP's stages), so the page and the lab refuse the same runs with the same figures.
//
// Why in the labs and not in the launcher: the launcher passes the lab's options on unread,
// a lab started by mpirun, srun or by hand never meets it, and only the rank knows its device
// (the GPU's free memory is known once the device is open). Each rank checks before
// dist_init(), whose rendezvous no rank leaves before every rank has checked, so no rank
// allocates while another is still reading what is free.
#ifndef SHARDLAB_MEMFIT_H
#define SHARDLAB_MEMFIT_H

#include <stddef.h>

#include "args.h"
#include "common/model/device.h"

// The kernels (ops.h) take element counts and index tensors with int: no tensor of a
// micro-batch may hold more elements than this.
#define MEMFIT_MAX_ELEMENTS 2147483647.0

typedef struct {
    double device;       // bytes one rank holds on its device: weights, gradients, optimizer
                         // state, activations, communication buffers
    double host;         // bytes one rank holds in host memory beside them (pp's whole model
                         // while it takes its stage; ZeRO-Offload's state)
    double rank;         // what the check compares: device + host on the CPU, device on a GPU,
                         // with the margin (memfit.c)
    double micro_batch;  // sequences of one rank's micro-batch
    double largest;      // elements of the largest tensor of that micro-batch
    const char *largest_what;
} MemNeed;

// lab: the lab's name; a: its parsed shared options; world: ranks in the run; opts[0..nopts):
// the command line's options as the lab or the launcher gets them ("--stage", "3", "--mixed",
// ... or "--stage=3"), from which the lab's own layout is read (defaults as the lab has them);
// on_host: 1 when the device's memory is host memory (the CPU backend). A lab with no model
// (collectives) needs nothing: all zero.
MemNeed memfit_need(const char *lab, const TrainArgs *a, int world, int nopts, char *const opts[], int on_host);

// Bytes of host memory this process may still take: MemAvailable from /proc/meminfo, capped
// by the control group's memory.max (a container sees the host's MemAvailable). -1 if unknown.
double memfit_host_available(void);

// 0 if `ranks` ranks of this need fit in `available` bytes (-1: unknown, not compared) of
// `where` ("host memory", "GPU 0"; source: where the figure comes from, "MemAvailable"), and
// the micro-batch's tensors fit the kernels' int counts; else -1 with one line in why: the
// figure needed, the figure available, and what to change (memory first: a run refused for
// both is told the figures).
int memfit_check(const MemNeed *n, int ranks, double available, const char *where, const char *source, char *why,
              size_t nwhy);

// A lab's check, after train_device() and before dist_init(): exits 2 (usage_error) with
// memfit_check()'s line when the run cannot be held. world, local_world: dist_env()'s; argc,
// argv: main's.
void memfit_check_rank(const char *lab, const TrainArgs *a, const Device *dev, int world, int local_world, int argc,
                     char **argv);

// What a run the web server is asked to start will hold: opts[0..nopts) the lab options it
// will pass on, the shared model options among them, every rank counted in host memory (the
// server has no GPU of its own to ask; a lab on a GPU checks its device itself). The server
// compares world * .rank, with what its running runs hold, against memfit_host_available()
// (memfit_check()).
MemNeed memfit_need_options(const char *lab, int world, int nopts, char *const opts[]);

#endif
