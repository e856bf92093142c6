/* Through iwarpd, ibv_reg_mr moves a buffer's pages onto the library's memory file in
 * place (same address, same contents) and ibv_dereg_mr moves them back: what a C program
 * can see of it. Each check prints what failed and exits 1; "ok" at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>
#include "check.h"


/* True if the page holding p is a mapping of the library's memory file. */
static int in_arena(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;
	while (f && fgets(line, sizeof line, f)) {
		unsigned long a, b;
		if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a <= (unsigned long)p &&
		    (unsigned long)p < b)
			found = strstr(line, "iwarp-arena") != NULL;
	}
	if (f)
		fclose(f);
	return found;
}

static int pattern_ok(const unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (unsigned char)(i * 7 + seed))
			return 0;
	return 1;
}

static void fill(unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(i * 7 + seed);
}

/* Global variables, as rdma-core's rdma_client keeps its messages: a file's private
 * copy (the data segment), which moves like the heap. */
static unsigned char global_msg[64] = { 1 };
static unsigned char global_neighbour[64] = { 2 };

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "a device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	CHECK(pd, "a domain through iwarpd");
	long page = sysconf(_SC_PAGESIZE);

	/* Two small heap objects, likely on one page; a large one of its own. */
	unsigned char *a = malloc(300), *b = malloc(300), *big = malloc(3 << 20);
	CHECK(a && b && big, "malloc");
	fill(a, 300, 1), fill(b, 300, 2), fill(big, 3 << 20, 3);
	struct ibv_mr *ma = ibv_reg_mr(pd, a, 300, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(ma && ma->addr == a, "a small heap buffer registered in place");
	CHECK(in_arena(a), "its page is the library's memory file now");
	CHECK(pattern_ok(a, 300, 1) && pattern_ok(b, 300, 2), "contents kept, the neighbour's too");
	b[5] = 0x5a; /* the neighbour is still the program's to write */
	struct ibv_mr *mb = ibv_reg_mr(pd, b, 300, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mb && b[5] == 0x5a, "an overlapping registration copies nothing over");
	struct ibv_mr *mbig = ibv_reg_mr(pd, big + 10, (3 << 20) - 20, IBV_ACCESS_REMOTE_READ);
	CHECK(mbig && pattern_ok(big, 3 << 20, 3), "3 MiB, unaligned, contents kept");
	CHECK(in_arena(big + (2 << 20)), "all of it");

	fill(global_msg, 64, 4);
	struct ibv_mr *mg = ibv_reg_mr(pd, global_msg, 64, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mg && in_arena(global_msg), "a global variable registered in place");
	CHECK(pattern_ok(global_msg, 64, 4) && global_neighbour[0] == 2, "contents kept");
	global_neighbour[1] = 9;
	CHECK(ibv_dereg_mr(mg) == 0 && !in_arena(global_msg), "and given back");
	CHECK(pattern_ok(global_msg, 64, 4) && global_neighbour[1] == 9, "contents kept");
	char path[] = "/tmp/iwarp-in-place-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0 && ftruncate(fd, page) == 0, "a file");
	unlink(path);
	unsigned char *copy = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(copy != MAP_FAILED, "mmap MAP_PRIVATE");
	fill(copy, 100, 5);
	struct ibv_mr *mc = ibv_reg_mr(pd, copy, 100, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mc && pattern_ok(copy, 100, 5), "a file's private copy moves too");
	CHECK(ibv_dereg_mr(mc) == 0 && pattern_ok(copy, 100, 5), "and comes back");
	munmap(copy, page);

	/* Memory the library cannot move: refused with errno, nothing changed. */
	unsigned char *shared = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(shared != MAP_FAILED, "mmap MAP_SHARED");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, shared, 64, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	      "a file's shared mapping refused");
	CHECK(!in_arena(shared), "and left alone");
	munmap(shared, page);
	close(fd);
	errno = 0;
	CHECK(!ibv_reg_mr(pd, (void *)main, 64, 0) && errno == EINVAL, "code refused");
	void *mapped = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(mapped != MAP_FAILED, "mmap");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, mapped, 64, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	      "shared memory of another kind refused");
	CHECK(!in_arena(mapped), "and left alone");
	void *gone = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap((char *)gone + page, page);
	errno = 0;
	CHECK(!ibv_reg_mr(pd, gone, 2 * page, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "a range with an unmapped page: EFAULT");
	CHECK(!in_arena(gone), "nothing moved");

	/* Deregistered: the pages another registration still covers stay shared; the
	 * others are the program's private memory again, contents kept. */
	CHECK(ibv_dereg_mr(ma) == 0, "dereg a");
	CHECK(in_arena(b) && b[5] == 0x5a, "b is still registered");
	CHECK(ibv_dereg_mr(mb) == 0 && ibv_dereg_mr(mbig) == 0, "dereg the rest");
	CHECK(!in_arena(a) && !in_arena(b) && !in_arena(big + (2 << 20)), "private again");
	b[5] = 7 * 5 + 2;
	CHECK(pattern_ok(a, 300, 1) && pattern_ok(b, 300, 2) && pattern_ok(big, 3 << 20, 3),
	      "contents kept");
	free(a), free(b), free(big);
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "close");
	printf("ok\n");
	return 0;
}
