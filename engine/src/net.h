/*
 * net.h - the network layer's entry points for main.c: listening sockets,
 * worker threads, shutdown. See net_listen.c and net_worker.c.
 *
 * Concurrency: called from the main thread, in this order: create workers,
 * listen, start workers, (signal) shutdown.
 */
#ifndef CACHET_NET_H
#define CACHET_NET_H

int  server_create_workers(void); /* event loops, rings, eventfds; 0 or -1 */
int  server_listen_all(void);     /* binds every worker's sockets (or the -s socket); 0 or -1 */
int  server_start_workers(void);
void server_shutdown(void);       /* stop accepting, flush, close, join */

#endif
