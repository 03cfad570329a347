/*
 * latency_cost.c - what the latency histogram costs a worker, in isolation:
 * nanoseconds per request for read batches of 1, 4, 16 and 64 requests
 * (latency_note per request, latency_batch_end per batch), with recording
 * on and off. The end-to-end cost is measured by bench-metrics.sh; this
 * says where it comes from, without the noise of a whole server.
 *
 * Single-threaded; run pinned (bench-metrics.sh uses the server's CPU).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "latency.h"
#include "proto_parser.h"

/* the thread's CPU time: time other processes take from this CPU does not count */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ns per request for batches of `batch` requests; the best of 5 passes. */
static double per_request_ns(int batch, long requests)
{
    double best = 1e30;
    for (int pass = 0; pass < 5; pass++) {
        long batches = requests / batch;
        double t0 = now_s();
        for (long b = 0; b < batches; b++) {
            for (int i = 0; i < batch; i++) latency_note(0, (i & 3) == 3 ? CMD_SET : CMD_GET);
            latency_batch_end(0);
            __asm__ __volatile__("" ::: "memory");
        }
        double ns = (now_s() - t0) * 1e9 / (double)(batches * batch);
        if (ns < best) best = ns;
    }
    return best;
}

int main(int argc, char **argv)
{
    long requests = argc > 1 ? atol(argv[1]) : 20000000L;
    static const int batches[] = { 1, 4, 16, 64 };
    printf("latency histogram cost per request (best of 5 passes of %ld requests):\n", requests);
    printf("  batch  recording-off  recording-on\n");
    double off[4], on[4];
    for (int i = 0; i < 4; i++) off[i] = per_request_ns(batches[i], requests);
    if (latency_init(1) != 0) { fprintf(stderr, "no memory\n"); return 1; }
    for (int i = 0; i < 4; i++) on[i] = per_request_ns(batches[i], requests);
    for (int i = 0; i < 4; i++)
        printf("  %5d  %10.2f ns  %10.2f ns\n", batches[i], off[i], on[i]);
    /* one machine-readable line for the summary */
    printf("LATENCY_COST batch1=%.2f batch4=%.2f batch16=%.2f batch64=%.2f off16=%.2f\n",
           on[0], on[1], on[2], on[3], off[2]);
    return 0;
}
