/*
 * A fault-injecting TCP proxy for the tests: it stands between a client
 * (the store's etcd or redis connection) and a real server on loopback
 * and does to the traffic what a network or a sick member does, on
 * command:
 *
 *   TU_PASS      forward both ways
 *   TU_HANG      accept connections, forward nothing either way (a hung
 *                or partitioned member; a paused process whose kernel
 *                still accepts)
 *   TU_DROP      forward requests, drop answers (a lost answer: the
 *                server applied the request, the client never hears)
 *
 * tu_proxy_cut closes every open connection at once (a reset after the
 * request went through).  Counters let a test wait for a condition ("the
 * request reached the server") instead of sleeping.
 */
#ifndef TSEC_TESTS_FAULTS_H
#define TSEC_TESTS_FAULTS_H

#include <stdatomic.h>
#include <stddef.h>

enum tu_fault { TU_PASS, TU_HANG, TU_DROP };

struct tu_proxy;

/* A proxy on 127.0.0.1 (its port in *port) to 127.0.0.1:upstream_port. */
struct tu_proxy *tu_proxy_start(int upstream_port, int *port);
void tu_proxy_set(struct tu_proxy *p, enum tu_fault f);
/*
 * Marks the connections whose requests carry needle (set it before they
 * open: "SUBSCRIBE", "/v3/watch"); tu_proxy_set_marked gives them a
 * fault of their own (a subscription or a watch that goes silent while
 * every other request is answered).
 */
void tu_proxy_mark(struct tu_proxy *p, const char *needle);
void tu_proxy_set_marked(struct tu_proxy *p, enum tu_fault f);
/* Closes every connection open now; new ones are accepted as before. */
void tu_proxy_cut(struct tu_proxy *p);
/*
 * Bytes forwarded to the server, connections accepted, and answer bytes
 * dropped (TU_DROP), so far.  An answer is gone only once it is counted
 * here: until the proxy has read it, setting TU_PASS would still let it
 * through.
 */
size_t tu_proxy_sent(struct tu_proxy *p);
size_t tu_proxy_accepted(struct tu_proxy *p);
size_t tu_proxy_dropped(struct tu_proxy *p);
void tu_proxy_stop(struct tu_proxy *p);

/* The port of an "http://127.0.0.1:PORT" or "127.0.0.1:PORT" endpoint. */
int tu_port_of(const char *endpoint);

#endif
