/* Protection domains and memory regions through the library, as a C program makes them,
 * and what misuse gets: each check prints what failed and exits 1; "ok" at the end. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "check.h"


int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 1 && list[0] && !list[1], "one device");
	CHECK(strcmp(ibv_get_device_name(list[0]), "iwarp0") == 0, "named iwarp0");
	CHECK(list[0]->transport_type == IBV_TRANSPORT_IWARP, "transport iWARP");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	CHECK(ctx, "open");

	struct ibv_device_attr attr;
	CHECK(ibv_query_device(ctx, &attr) == 0, "query device");
	CHECK(attr.max_qp_wr > 0 && attr.phys_port_cnt == 1, "limits from the stack: %d", attr.max_qp_wr);
	struct ibv_port_attr port;
	CHECK(ibv_query_port(ctx, 1, &port) == 0 && port.state == IBV_PORT_ACTIVE, "port 1 active");
	CHECK(ibv_query_port(ctx, 2, &port) == EINVAL, "no port 2");
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0 && gid.raw[10] == 0xff && gid.raw[11] == 0xff,
	      "GID 0 is an IPv4-mapped address");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd && pd->context == ctx, "alloc pd");
	size_t len = 1 << 20;
	char *buf = malloc(len);
	CHECK(buf, "malloc");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_REMOTE_READ);
	CHECK(mr, "reg_mr on malloc'ed memory");
	CHECK(mr->addr == buf && mr->length == len && mr->pd == pd && mr->context == ctx, "mr fields");
	CHECK(mr->lkey != 0 && mr->lkey == mr->rkey, "keys: %x %x", mr->lkey, mr->rkey);
	struct ibv_mr *mr2 = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr2 && mr2->lkey != mr->lkey, "a second region over the same octets, another key");

	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, len, IBV_ACCESS_ON_DEMAND) && errno == EOPNOTSUPP,
	      "on-demand paging refused, named");
	CHECK(!ibv_reg_mr(pd, NULL, len, 0) && errno == EINVAL, "null address refused");

	/* A completion queue with its channel: nothing to poll, no event yet. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0, "comp channel with a descriptor");
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, (void *)0x1234, ch, 0);
	CHECK(cq && cq->channel == ch && cq->cq_context == (void *)0x1234, "create cq");
	struct ibv_wc wc[4];
	CHECK(ibv_poll_cq(cq, 4, wc) == 0, "an empty queue polls 0");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "arm");
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 10) == 0, "no event without a completion");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "non-blocking");
	struct ibv_cq *ev_cq; void *ev_ctx;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "no event: EAGAIN");
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "a channel with a queue stays");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	CHECK(ibv_destroy_cq(cq) == EINVAL, "destroy cq twice refused");
	CHECK(ibv_poll_cq(cq, 4, wc) < 0, "a destroyed queue polls an error, not freed memory");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");

	/* A queue pair of the connection manager, not connected: a receive is kept for the
	 * connection, a send refused, a list longer than the library reads refused before
	 * any of it is read (bad_wr names it), and its queue and domain stay while it does. */
	struct rdma_event_channel *ec = rdma_create_event_channel();
	CHECK(ec && ec->fd >= 0, "event channel");
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ec, &id, (void *)0x77, RDMA_PS_TCP) == 0, "create id");
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(9),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve");
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ec, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED &&
	      ev->id == id && id->context == (void *)0x77 && id->verbs, "ADDR_RESOLVED");
	CHECK(rdma_ack_cm_event(ev) == 0, "ack");
	CHECK(rdma_ack_cm_event(ev) == -1 && errno == EINVAL, "ack twice refused");
	struct ibv_pd *qpd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *qcq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	CHECK(qpd && qcq, "pd and cq on the identifier's context");
	/* A shared receive queue: created with what it got, queried, its resizing refused
	 * by name; the queue pair below draws on it. */
	struct ibv_srq_init_attr sa = { .srq_context = (void *)0x55,
					.attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(qpd, &sa);
	CHECK(srq && srq->srq_context == (void *)0x55 && srq->pd == qpd && sa.attr.max_sge >= 1,
	      "create srq");
	struct ibv_srq_attr sq;
	CHECK(ibv_query_srq(srq, &sq) == 0 && sq.max_wr == 8, "query srq: %u", sq.max_wr);
	sq.max_wr = 16;
	CHECK(ibv_modify_srq(srq, &sq, IBV_SRQ_MAX_WR) == EOPNOTSUPP, "resizing refused");
	sa.attr.max_wr = 1 << 30;
	CHECK(!ibv_create_srq(qpd, &sa) && errno == EINVAL, "a queue too deep refused");
	struct ibv_qp_init_attr qa = { .send_cq = qcq, .recv_cq = qcq, .srq = srq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(id, qpd, &qa) == 0 && id->qp && id->qp->send_cq == qcq &&
	      id->qp->srq == srq, "create qp on the srq");
	char *rbuf = malloc(4096);
	struct ibv_mr *rmr = ibv_reg_mr(qpd, rbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(rmr, "reg");
	struct ibv_sge sge = { .addr = (uintptr_t)rbuf, .length = 4096, .lkey = rmr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *rbad = NULL;
	CHECK(ibv_post_recv(id->qp, &rwr, &rbad) == 0, "a receive before the connection is kept");
	CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == 0, "a receive in the shared queue");
	struct ibv_recv_wr rwr2 = rwr;
	rwr2.num_sge = 65;
	rwr.next = &rwr2;
	CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == EINVAL && rbad == &rwr2,
	      "a shared-queue list stops at its bad request");
	rwr.next = NULL;
	rwr.num_sge = 65;
	CHECK(ibv_post_recv(id->qp, &rwr, &rbad) == EINVAL && rbad == &rwr,
	      "a 65-entry list refused before it is read");
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND }, *sbad = NULL;
	CHECK(ibv_post_send(id->qp, &swr, &sbad) == EINVAL && sbad == &swr, "no send before RTS");
	CHECK(ibv_destroy_cq(qcq) == EBUSY, "a queue with a queue pair stays");
	CHECK(ibv_dealloc_pd(qpd) == EBUSY, "a domain with a queue pair stays");
	CHECK(ibv_destroy_srq(srq) == EBUSY, "a shared queue a queue pair draws on stays");
	rdma_destroy_qp(id);
	CHECK(ibv_destroy_srq(srq) == 0, "then it goes");
	CHECK(ibv_destroy_srq(srq) == EINVAL, "destroy srq twice refused");
	CHECK(ibv_dereg_mr(rmr) == 0 && ibv_destroy_cq(qcq) == 0 && ibv_dealloc_pd(qpd) == 0,
	      "freed once the queue pair is gone");
	free(rbuf);
	CHECK(rdma_destroy_id(id) == 0, "destroy id");
	CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL, "destroy id twice refused");
	rdma_destroy_event_channel(ec);

	/* Synchronous use (no channel), as rdma_client: each call returns its outcome. */
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	CHECK(rdma_getaddrinfo("127.0.0.1", "1", &hints, &res) == 0, "getaddrinfo");
	struct ibv_qp_init_attr ea = { .cap = { .max_send_wr = 2, .max_recv_wr = 3,
		.max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 16 }, .sq_sig_all = 1 };
	struct rdma_cm_id *ep;
	CHECK(rdma_create_ep(&ep, res, NULL, &ea) == 0 && ep->qp && ep->pd &&
	      ep->send_cq && ep->recv_cq && ep->send_cq_channel && ep->recv_cq_channel &&
	      ep->send_cq->cq_context == ep && ep->recv_cq->channel == ep->recv_cq_channel,
	      "an endpoint: resolved, with its queue pair, the queues made for it and a domain");
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK(ibv_query_qp(ep->qp, &qattr, IBV_QP_CAP, &qinit) == 0 &&
	      qattr.cap.max_recv_wr == 3 && qinit.cap.max_inline_data == 16 &&
	      qinit.send_cq == ep->send_cq && qinit.sq_sig_all == 1 &&
	      qattr.qp_state == IBV_QPS_INIT, "ibv_query_qp");
	errno = 0;
	CHECK(rdma_connect(ep, NULL) == -1 && errno == ECONNREFUSED,
	      "nothing listens on port 1: refused, as errno");
	CHECK(rdma_disconnect(ep) == 0, "a disconnect of what never connected does not wait");
	int zero = 0;
	uint8_t timeout = 14, tos = 32;
	CHECK(rdma_set_option(ep, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1) == 0 &&
	      rdma_set_option(ep, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &zero, 4) == 0 &&
	      rdma_set_option(ep, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &zero, 4) == 0,
	      "the options that change nothing over TCP are taken");
	errno = 0;
	CHECK(rdma_set_option(ep, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == -1 &&
	      errno == EOPNOTSUPP, "a type of service is refused");
	rdma_destroy_ep(ep);
	CHECK(rdma_destroy_id(ep) == -1 && errno == EINVAL, "the endpoint is gone");
	rdma_freeaddrinfo(res);
	struct rdma_event_channel *ec2 = rdma_create_event_channel();
	struct rdma_cm_id *async, *req;
	CHECK(ec2 && rdma_create_id(ec2, &async, NULL, RDMA_PS_TCP) == 0, "an id with a channel");
	errno = 0;
	CHECK(rdma_get_request(async, &req) == -1 && errno == EINVAL,
	      "rdma_get_request is for synchronous listeners");
	CHECK(rdma_destroy_id(async) == 0, "destroy");
	rdma_destroy_event_channel(ec2);

	/* Misuse: freed in the wrong order, twice, or never ours. */
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "a domain with regions stays");
	CHECK(ibv_close_device(ctx) == -1 && errno == EBUSY, "a context with domains stays");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(mr2) == 0, "dereg");
	CHECK(ibv_dereg_mr(mr) == EINVAL, "dereg twice refused");
	struct ibv_mr fake = *mr2;
	CHECK(ibv_dereg_mr(&fake) == EINVAL, "a region never ours refused");
	free(buf); /* the library no longer touches it */
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc pd");
	CHECK(ibv_dealloc_pd(pd) == EINVAL, "dealloc twice refused");
	CHECK(ibv_close_device(ctx) == 0, "close");
	CHECK(ibv_close_device(ctx) == -1 && errno == EINVAL, "close twice refused");
	CHECK(ibv_alloc_pd(ctx) == NULL && errno == EINVAL, "a closed context refused");
	printf("ok\n");
	return 0;
}
