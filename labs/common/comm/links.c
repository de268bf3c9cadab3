// links.c — see links.h.
#include "links.h"

#include <string.h>

const Link links[] = {
    {"nvlink4", "NVLink 4 (H100 SXM)", 450, 2, "NVIDIA H100 datasheet: 900 GB/s NVLink, both directions"},
    {"nvlink3", "NVLink 3 (A100 SXM)", 300, 2, "NVIDIA A100 datasheet: 600 GB/s NVLink, both directions"},
    {"pcie5", "PCIe 5.0 x16", 64, 3, "PCI-SIG: 32 GT/s a lane, 16 lanes"},
    {"pcie4", "PCIe 4.0 x16", 32, 3, "PCI-SIG: 16 GT/s a lane, 16 lanes"},
    {"ib-ndr", "InfiniBand NDR, one 400 Gb/s port", 50, 5, "NVIDIA ConnectX-7 / Quantum-2: 400 Gb/s"},
    {"ib-hdr", "InfiniBand HDR, one 200 Gb/s port", 25, 5, "NVIDIA ConnectX-6 / Quantum: 200 Gb/s"},
    {"eth-100g", "100 Gb Ethernet (RoCE)", 12.5, 10, "IEEE 802.3: 100 Gb/s"},
    {"eth-25g", "25 Gb Ethernet", 3.125, 15, "IEEE 802.3: 25 Gb/s"},
};
const int nlinks = (int)(sizeof links / sizeof links[0]);

const Link *link_find(const char *name) {
    for (int i = 0; name && i < nlinks; i++)
        if (!strcmp(links[i].name, name)) return &links[i];
    return NULL;
}

double link_ring_steps(const char *coll, int n) {
    if (!strcmp(coll, "send") || !strcmp(coll, "recv")) return 1;
    if (n <= 1) return 0;
    if (!strcmp(coll, "all_reduce")) return 2.0 * (n - 1);
    return n - 1;  // reduce_scatter, all_gather, broadcast, reduce, barrier: a ring's n - 1
}

double link_call_ms(const Link *l, const char *coll, int n, double bytes) {
    return link_ring_steps(coll, n) * l->alpha_us * 1e-3 + bytes / (l->gbps * 1e9) * 1e3;
}
