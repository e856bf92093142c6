/* A connection to a port nobody listens on yet is tried again for a moment before it is
 * REJECTED: perftest connects its test connection right after the handshake on its
 * control connection, before a slower server (siw in a VM) listens, and its own retry
 * reuses the identifiers it destroyed. Here the listener comes 200 ms after the connect;
 * the connection is established. A port that stays closed is still REJECTED
 * (ECONNREFUSED). Each check prints what failed and exits 1; "ok" at the end. */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "event channel");
	/* A free port: bound by a listener that is destroyed at once. */
	struct rdma_cm_id *probe, *listen, *srv;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	CHECK(rdma_create_id(ch, &probe, NULL, RDMA_PS_TCP) == 0 &&
	      rdma_bind_addr(probe, (struct sockaddr *)&a) == 0 && rdma_listen(probe, 1) == 0,
	      "probe");
	int port = ntohs(((struct sockaddr_in *)rdma_get_local_addr(probe))->sin_port);
	CHECK(rdma_destroy_id(probe) == 0, "probe gone");

	struct rdma_cm_id *cli = client(ch, port);
	CHECK(cli, "client");
	CHECK(rdma_connect(cli, NULL) == 0, "connect before anybody listens");
	usleep(200 * 1000);
	a.sin_port = htons(port);
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0 &&
	      rdma_bind_addr(listen, (struct sockaddr *)&a) == 0 && rdma_listen(listen, 1) == 0,
	      "listen 200 ms later");
	CHECK(expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &srv, NULL),
	      "the connect reached the late listener");
	struct ibv_qp_init_attr qb = { .cap = { .max_send_wr = 4, .max_recv_wr = 4,
		.max_send_sge = 1, .max_recv_sge = 1 }, .qp_type = IBV_QPT_RC };
	CHECK(rdma_create_qp(srv, NULL, &qb) == 0 && rdma_accept(srv, NULL) == 0, "accept");
	CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) &&
	      expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL), "both ends up");
	CHECK(rdma_disconnect(cli) == 0 && expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) &&
	      expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL), "both ends down");
	rdma_destroy_qp(cli);
	rdma_destroy_qp(srv);
	CHECK(rdma_destroy_id(cli) == 0 && rdma_destroy_id(srv) == 0, "ids gone");

	/* Nobody listens at all: REJECTED, ECONNREFUSED, once the moment has passed. */
	CHECK(rdma_destroy_id(listen) == 0, "listener gone");
	struct rdma_cm_id *lone = client(ch, port);
	int status = 0;
	CHECK(lone && rdma_connect(lone, NULL) == 0 &&
	      expect(ch, RDMA_CM_EVENT_REJECTED, NULL, &status) && status == -ECONNREFUSED,
	      "a port that stays closed is refused: %d", status);
	rdma_destroy_qp(lone);
	CHECK(rdma_destroy_id(lone) == 0, "lone gone");
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
