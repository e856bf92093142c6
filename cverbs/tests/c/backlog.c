/* rdma_listen's backlog bounds the connection requests that wait for the program: with
 * a backlog of 2 and nothing read, the third and fourth clients are REJECTED (as the
 * kernel's rdma_ucm rejects them), so a peer that connects again and again cannot make a
 * program that does not read its events hold ever more identifiers. Taking a request
 * makes room for the next. Each check prints what failed and exits 1; "ok" at the end. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "check.h"

int main(void)
{
	struct rdma_event_channel *srv = rdma_create_event_channel();
	struct rdma_event_channel *cli = rdma_create_event_channel();
	CHECK(srv && cli, "event channels");
	struct rdma_cm_id *listen, *c[5], *req[3], *got;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	CHECK(rdma_create_id(srv, &listen, NULL, RDMA_PS_TCP) == 0 &&
	      rdma_bind_addr(listen, (struct sockaddr *)&a) == 0 && rdma_listen(listen, 2) == 0,
	      "listen with a backlog of 2");
	int port = ntohs(((struct sockaddr_in *)rdma_get_local_addr(listen))->sin_port);

	/* Four clients; nobody reads the listener's events. Two of them (whichever the
	 * listener heard last) are beyond the backlog. */
	for (int i = 0; i < 5; i++)
		CHECK((c[i] = client(cli, port)), "client %d", i);
	for (int i = 0; i < 4; i++)
		CHECK(rdma_connect(c[i], NULL) == 0, "connect %d", i);
	struct rdma_cm_id *refused[2];
	for (int i = 0; i < 2; i++)
		CHECK(expect(cli, RDMA_CM_EVENT_REJECTED, &refused[i], NULL), "a client beyond the backlog");
	CHECK(refused[0] != refused[1], "two different clients rejected");

	/* Taking a request makes room for one more. */
	CHECK(expect(srv, RDMA_CM_EVENT_CONNECT_REQUEST, &req[0], NULL), "first request");
	CHECK(rdma_connect(c[4], NULL) == 0, "connect 4");
	CHECK(expect(srv, RDMA_CM_EVENT_CONNECT_REQUEST, &req[1], NULL) &&
	      expect(srv, RDMA_CM_EVENT_CONNECT_REQUEST, &req[2], NULL), "second and fifth requests");
	int fl = fcntl(srv->fd, F_GETFL);
	CHECK(fcntl(srv->fd, F_SETFL, fl | O_NONBLOCK) == 0, "non-blocking");
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(srv, &ev) == -1 && errno == EAGAIN, "no other request queued");
	CHECK(fcntl(srv->fd, F_SETFL, fl) == 0, "blocking again");

	/* The three admitted are refused by the program; their clients see it. */
	for (int i = 0; i < 3; i++)
		CHECK(rdma_reject(req[i], NULL, 0) == 0, "reject %d", i);
	for (int i = 0; i < 3; i++)
		CHECK(expect(cli, RDMA_CM_EVENT_REJECTED, &got, NULL) && got != refused[0] &&
		      got != refused[1], "an admitted client refused");
	for (int i = 0; i < 3; i++)
		CHECK(rdma_destroy_id(req[i]) == 0, "request %d gone", i);
	for (int i = 0; i < 5; i++) {
		rdma_destroy_qp(c[i]);
		CHECK(rdma_destroy_id(c[i]) == 0, "client %d gone", i);
	}
	CHECK(rdma_destroy_id(listen) == 0, "listener gone");
	rdma_destroy_event_channel(srv);
	rdma_destroy_event_channel(cli);
	printf("ok\n");
	return 0;
}
