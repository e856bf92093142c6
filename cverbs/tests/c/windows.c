/* Memory windows from C, both ends of one connection in this process (loopback): a type
 * 1 window bound by ibv_bind_mw and a type 2 window bound by IBV_WR_BIND_MW are written
 * through by the peer, each completion says what it was, and a window unbound (type 1
 * unbound, type 2 invalidated with IBV_WR_LOCAL_INV) refuses the peer, which ends the
 * connection with an asynchronous event (IBV_EVENT_QP_FATAL). Each check prints what
 * failed and exits 1; "ok" at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <poll.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "check.h"


/* One completion of cq, waiting up to 10 s; 0 if none came. */
static int one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	time_t until = time(NULL) + 10;
	while (time(NULL) < until) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n;
	}
	return 0;
}

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *cli, *srv;
	CHECK(ch && rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0 &&
	      rdma_create_id(ch, &cli, NULL, RDMA_PS_TCP) == 0, "ids");
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0 && rdma_listen(listen, 1) == 0,
	      "listen");
	a.sin_port = ((struct sockaddr_in *)rdma_get_local_addr(listen))->sin_port;
	CHECK(rdma_resolve_addr(cli, NULL, (struct sockaddr *)&a, 1000) == 0 &&
	      expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL) &&
	      rdma_resolve_route(cli, 1000) == 0 && expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL),
	      "resolve");
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 8, .max_recv_wr = 8,
		.max_send_sge = 1, .max_recv_sge = 1 }, .qp_type = IBV_QPT_RC };
	CHECK(rdma_create_qp(cli, NULL, &qa) == 0, "client qp");
	CHECK(rdma_connect(cli, NULL) == 0 && expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &srv, NULL),
	      "a request");
	struct ibv_qp_init_attr qb = qa;
	CHECK(rdma_create_qp(srv, NULL, &qb) == 0 && rdma_accept(srv, NULL) == 0, "accept");
	CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) &&
	      expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL), "both ends up");

	/* The server's buffer, with the right to bind windows and no remote right of its own
	 * (the peer reaches it through windows only), as the verbs have it; the client's
	 * source. */
	char *dst = calloc(1, 4096), *src = malloc(64);
	struct ibv_mr *dmr = ibv_reg_mr(srv->pd, dst, 4096,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mr *smr = ibv_reg_mr(cli->pd, src, 64, IBV_ACCESS_LOCAL_WRITE);
	CHECK(dmr && smr, "regions");
	struct ibv_wc wc;
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = 64, .lkey = smr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	/* Type 1: bound at once, its completion signaled. */
	struct ibv_mw *mw1 = ibv_alloc_mw(srv->pd, IBV_MW_TYPE_1);
	CHECK(mw1 && mw1->type == IBV_MW_TYPE_1 && mw1->pd == srv->pd, "a type 1 window");
	struct ibv_mw_bind b1 = { .wr_id = 11, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = dmr, .addr = (uintptr_t)dst + 256, .length = 512,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	CHECK(ibv_bind_mw(srv->qp, mw1, &b1) == 0, "ibv_bind_mw");
	CHECK(one(srv->send_cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
	      wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 11, "its completion: IBV_WC_BIND_MW");
	memset(src, 0x11, 64);
	w.wr.rdma.remote_addr = (uintptr_t)dst + 256;
	w.wr.rdma.rkey = mw1->rkey;
	CHECK(ibv_post_send(cli->qp, &w, &bad) == 0 && one(cli->send_cq, &wc) == 1 &&
	      wc.status == IBV_WC_SUCCESS, "a Write through it");
	time_t until = time(NULL) + 10;
	while (dst[256 + 63] != 0x11 && time(NULL) < until)
		;
	CHECK(dst[256] == 0x11 && dst[256 + 63] == 0x11 && dst[255] == 0, "placed in its range");

	/* Type 2: bound by a request on the server's queue pair, under the next key. */
	struct ibv_mw *mw2 = ibv_alloc_mw(srv->pd, IBV_MW_TYPE_2);
	CHECK(mw2, "a type 2 window");
	struct ibv_send_wr bw = { .wr_id = 21, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED };
	bw.bind_mw.mw = mw2;
	bw.bind_mw.rkey = ibv_inc_rkey(mw2->rkey) ^ 0x5;
	bw.bind_mw.bind_info = (struct ibv_mw_bind_info){ .mr = dmr,
		.addr = (uintptr_t)dst + 1024, .length = 1024,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	CHECK(ibv_post_send(srv->qp, &bw, &bad) == EINVAL && bad == &bw,
	      "a key that is not the window's next refused");
	bw.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	CHECK(ibv_post_send(srv->qp, &bw, &bad) == 0 && one(srv->send_cq, &wc) == 1 &&
	      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 21,
	      "IBV_WR_BIND_MW completes");
	CHECK(mw2->rkey == bw.bind_mw.rkey, "the window has its new key");
	memset(src, 0x22, 64);
	w.wr.rdma.remote_addr = (uintptr_t)dst + 1024;
	w.wr.rdma.rkey = mw2->rkey;
	CHECK(ibv_post_send(cli->qp, &w, &bad) == 0 && one(cli->send_cq, &wc) == 1 &&
	      wc.status == IBV_WC_SUCCESS, "a Write through the type 2 window");
	until = time(NULL) + 10;
	while (dst[1024 + 63] != 0x22 && time(NULL) < until)
		;
	CHECK(dst[1024] == 0x22 && dst[1024 + 63] == 0x22, "placed");
	struct ibv_send_wr inv = { .wr_id = 22, .opcode = IBV_WR_LOCAL_INV,
				   .send_flags = IBV_SEND_SIGNALED,
				   .invalidate_rkey = mw2->rkey };
	CHECK(ibv_post_send(srv->qp, &inv, &bad) == 0 && one(srv->send_cq, &wc) == 1 &&
	      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "IBV_WR_LOCAL_INV");

	/* Unbound, the type 1 window refuses the peer: a Read through it fails (a Write would
	 * complete once sent, as iWARP's do), and the queue pair with it. */
	struct ibv_mw_bind unbind = { .wr_id = 12 };
	uint32_t old = mw1->rkey;
	CHECK(ibv_bind_mw(srv->qp, mw1, &unbind) == 0, "unbind");
	w.wr.rdma.remote_addr = (uintptr_t)dst + 256;
	w.wr.rdma.rkey = old;
	w.opcode = IBV_WR_RDMA_READ;
	memset(src, 0x33, 64);
	CHECK(ibv_post_send(cli->qp, &w, &bad) == 0 && one(cli->send_cq, &wc) == 1 &&
	      wc.status != IBV_WC_SUCCESS, "a Read through an unbound window fails");
	CHECK(src[0] == 0x33, "and read nothing");
	/* The Terminate ended the connection in error: an asynchronous event says so. */
	struct pollfd pfd = { .fd = cli->verbs->async_fd, .events = POLLIN };
	CHECK(pfd.fd >= 0 && poll(&pfd, 1, 10000) == 1, "an asynchronous event comes");
	struct ibv_async_event ae;
	CHECK(ibv_get_async_event(cli->verbs, &ae) == 0 && ae.event_type == IBV_EVENT_QP_FATAL &&
	      (ae.element.qp == cli->qp || ae.element.qp == srv->qp), "IBV_EVENT_QP_FATAL");
	ibv_ack_async_event(&ae);

	CHECK(ibv_dealloc_mw(mw1) == 0 && ibv_dealloc_mw(mw2) == 0, "dealloc");
	rdma_disconnect(cli);
	rdma_destroy_qp(cli), rdma_destroy_qp(srv);
	CHECK(ibv_dereg_mr(dmr) == 0 && ibv_dereg_mr(smr) == 0, "dereg");
	rdma_destroy_id(cli), rdma_destroy_id(srv), rdma_destroy_id(listen);
	free(dst), free(src);
	printf("ok\n");
	return 0;
}
