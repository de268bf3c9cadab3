// links.h — interconnects by their published bandwidth, and what a collective costs on one:
// the table `shardlab whatif` projects onto and the labs' --link emulates.
//
// A collective over n ranks takes k alpha + bytes / beta on a link: k the message steps of a
// ring (2(n-1) for an all-reduce, n-1 for a reduce-scatter, an all-gather, a broadcast or a
// reduce, 1 for a send or a receive), bytes what this rank sent, beta the link's bandwidth in
// one direction, alpha one step's latency. The bandwidths are the vendors' published figures;
// the latencies only an order of magnitude (one hop's software and wire time), not measured.
#ifndef SHARDLAB_LINKS_H
#define SHARDLAB_LINKS_H

typedef struct {
    const char *name, *what;
    double gbps, alpha_us;  // GB/s in one direction; us a message step
    const char *source;
} Link;

extern const Link links[];
extern const int nlinks;

// The link called name, or NULL ("none" is none).
const Link *link_find(const char *name);
// The ring's message steps of a collective (dist_coll_name()'s names, span names) over n ranks.
double link_ring_steps(const char *coll, int n);
// k alpha + bytes / beta, in ms.
double link_call_ms(const Link *l, const char *coll, int n, double bytes);

#endif
