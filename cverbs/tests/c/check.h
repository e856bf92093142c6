/* What the C test programs share: CHECK, which prints what failed and makes main return
 * 1, expect, which takes the next connection-manager event, and client, a resolved
 * client identifier. */
#ifndef CHECK_H
#define CHECK_H

#include <errno.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); return 1; } } while (0)

/* The next event on ch, which must be of type want (acknowledged here); its id in *id and
 * its status in *status when those are not null. 0 if none came or it was another. */
static inline int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
			 struct rdma_cm_id **id, int *status)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return 0;
	int ok = ev->event == want;
	if (!ok)
		fprintf(stderr, "event %s, not %s\n", rdma_event_str(ev->event), rdma_event_str(want));
	if (id)
		*id = ev->id;
	if (status)
		*status = ev->status;
	rdma_ack_cm_event(ev);
	return ok;
}

/* A client on ch, resolved to 127.0.0.1:port, with a queue pair of its own. */
static inline struct rdma_cm_id *client(struct rdma_event_channel *ch, int port)
{
	struct rdma_cm_id *cli;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4,
		.max_send_sge = 1, .max_recv_sge = 1 }, .qp_type = IBV_QPT_RC };
	if (rdma_create_id(ch, &cli, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(cli, NULL, (struct sockaddr *)&a, 1000) ||
	    !expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL) ||
	    rdma_resolve_route(cli, 1000) || !expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL) ||
	    rdma_create_qp(cli, NULL, &qa))
		return NULL;
	return cli;
}

#endif
