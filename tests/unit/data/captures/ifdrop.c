/* Interposes libpcap's pcap_stats: the real counts, with ps_ifdrop set, so tcpdump's own info() prints
   its "dropped by interface" line (which libpcap 1.10 on a veth or lo never has a count for). */
#define _GNU_SOURCE
#include <dlfcn.h>
struct pcap_stat { unsigned int ps_recv, ps_drop, ps_ifdrop; };
int pcap_stats(void *p, struct pcap_stat *ps) {
    int (*real)(void *, struct pcap_stat *) = dlsym(RTLD_NEXT, "pcap_stats");
    int rc = real(p, ps);
    if (rc == 0) ps->ps_ifdrop = 1234;
    return rc;
}
