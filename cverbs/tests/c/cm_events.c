/* An identifier's connection-manager events end with it, as in librdmacm: an event not
 * yet taken when its identifier is destroyed is never handed out, and rdma_destroy_id
 * returns only once every event handed out for it was acknowledged. rping (rdma-core
 * 44) relies on both: its main thread destroys the identifier, the event channel and
 * its own state while its event thread may still be handling DISCONNECTED.
 * Each check prints what failed and exits 1; "ok" at the end. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "check.h"


static volatile int destroyed;

static void *destroy(void *id)
{
	destroyed = rdma_destroy_id(id) == 0 ? 1 : -1;
	return NULL;
}

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "event channel");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "non-blocking");
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(1) };
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct rdma_cm_event *ev;

	/* Destroyed with its event queued: the event is never handed out. */
	struct rdma_cm_id *a, *b;
	CHECK(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0, "create a");
	CHECK(rdma_resolve_addr(a, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve a");
	CHECK(rdma_destroy_id(a) == 0, "destroy a with ADDR_RESOLVED not taken");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN,
	      "no event of a destroyed identifier is handed out");

	/* Destroyed while another thread holds its event: the destroy waits for the ack. */
	CHECK(rdma_create_id(ch, &b, (void *)0xb, RDMA_PS_TCP) == 0, "create b");
	CHECK(rdma_resolve_addr(b, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve b");
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->id == b &&
	      ev->event == RDMA_CM_EVENT_ADDR_RESOLVED, "b's event");
	pthread_t t;
	CHECK(pthread_create(&t, NULL, destroy, b) == 0, "a thread destroys b");
	usleep(100 * 1000);
	CHECK(destroyed == 0, "rdma_destroy_id returned while b's event was held");
	CHECK(ev->id->context == (void *)0xb, "the held event's identifier is still readable");
	CHECK(rdma_ack_cm_event(ev) == 0, "ack");
	pthread_join(t, NULL);
	CHECK(destroyed == 1, "then the destroy returns, and succeeds");

	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
