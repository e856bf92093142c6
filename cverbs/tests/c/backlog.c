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

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); return 1; } } while (0)

/* The next event on ch, of type want; its id in *id. */
static int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		  struct rdma_cm_id **id)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return 0;
	int ok = ev->event == want;
	if (!ok)
		fprintf(stderr, "event %s, not %s\n", rdma_event_str(ev->event), rdma_event_str(want));
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
	return ok;
}

/* A client on ch, resolved to 127.0.0.1:port, with a queue pair of its own. */
static struct rdma_cm_id *client(struct rdma_event_channel *ch, int port)
{
	struct rdma_cm_id *cli;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4,
		.max_send_sge = 1, .max_recv_sge = 1 }, .qp_type = IBV_QPT_RC };
	if (rdma_create_id(ch, &cli, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(cli, NULL, (struct sockaddr *)&a, 1000) ||
	    !expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) ||
	    rdma_resolve_route(cli, 1000) || !expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL) ||
	    rdma_create_qp(cli, NULL, &qa))
		return NULL;
	return cli;
}

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
		CHECK(expect(cli, RDMA_CM_EVENT_REJECTED, &refused[i]), "a client beyond the backlog");
	CHECK(refused[0] != refused[1], "two different clients rejected");

	/* Taking a request makes room for one more. */
	CHECK(expect(srv, RDMA_CM_EVENT_CONNECT_REQUEST, &req[0]), "first request");
	CHECK(rdma_connect(c[4], NULL) == 0, "connect 4");
	CHECK(expect(srv, RDMA_CM_EVENT_CONNECT_REQUEST, &req[1]) &&
	      expect(srv, RDMA_CM_EVENT_CONNECT_REQUEST, &req[2]), "second and fifth requests");
	int fl = fcntl(srv->fd, F_GETFL);
	CHECK(fcntl(srv->fd, F_SETFL, fl | O_NONBLOCK) == 0, "non-blocking");
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(srv, &ev) == -1 && errno == EAGAIN, "no other request queued");
	CHECK(fcntl(srv->fd, F_SETFL, fl) == 0, "blocking again");

	/* The three admitted are refused by the program; their clients see it. */
	for (int i = 0; i < 3; i++)
		CHECK(rdma_reject(req[i], NULL, 0) == 0, "reject %d", i);
	for (int i = 0; i < 3; i++)
		CHECK(expect(cli, RDMA_CM_EVENT_REJECTED, &got) && got != refused[0] &&
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
