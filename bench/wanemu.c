/*
 * wanemu: a long-haul link emulator on NFQUEUE, for bench/wan.py (this kernel has no sch_netem).
 *
 * It runs in a "router" network namespace whose FORWARD chain sends each direction to its own queue
 * (iptables ... -j NFQUEUE --queue-num 0 for A->B, 1 for B->A). Per direction it models one link:
 *
 *   arrival -> random loss -> bottleneck (rate, drop-tail buffer of --buffer-ms) -> propagation (--delay-ms) -> out
 *
 * Every packet is decided on arrival: a lost one, or one that finds the bottleneck buffer full, gets NF_DROP at
 * once; any other gets its departure time (when the bottleneck has sent it, plus the one-way delay) and is held
 * in the kernel's queue until then. Departure times never decrease within a direction, so the held packets are
 * released in order with one batch verdict (all ids up to N) per wake-up. The bottleneck counts the IP length
 * plus --overhead bytes (14: an Ethernet header, which puts the 1 Gbit/s goodput ceiling at 956 Mbit/s with
 * MTU 1500, as on a real Ethernet path).
 *
 * Control on stdin, one command a line, each answered with one line on stdout:
 *   loss P        set the random loss probability (0..1) of both directions    -> ok
 *   delay MS      set the one-way delay of both directions (between runs)     -> ok
 *   stats         counters since the last reset, as one JSON object              -> {...}
 *   reset         zero the counters                                               -> ok
 *   quit          exit (so does end of file)
 *
 * Build: cc -O2 -Wall -Wextra -o wanemu wanemu.c -lnetfilter_queue -lnfnetlink
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

#define RING_SIZE (1u << 18) /* held packets per direction; 2.5x what 110 ms at 1 Gbit/s needs with MTU 1500 */
#define COPY_RANGE 64u       /* IPv4 header and the TCP flags are all we read */

struct held {
	uint32_t id;
	uint32_t len;
	uint64_t due_ns;
};

struct dir {
	const char *name;
	struct nfq_q_handle *qh;
	struct held *ring;
	uint32_t head, tail; /* ring[head..tail) */
	double link_free_ns; /* when the bottleneck has sent everything accepted so far */
	/* counters */
	uint64_t in_pkts, in_bytes, out_pkts, out_bytes, drop_loss, drop_buffer, drop_ring, syns, bad;
	uint64_t payload_pkts, turns; /* turns: payload packets whose previous payload packet went the other way */
	uint64_t win_start_ns, win_bytes; /* wire bytes released in the current 100 ms window */
	double peak_bps;                  /* the best 100 ms window so far */
	uint64_t first_in_ns, first_out_ns, last_out_ns;
	uint64_t late_max_ns, late_sum_ns, late_over_1ms, qdelay_max_ns, held_max;
};

static struct dir dirs[2];
static double loss_p, rate_bps, delay_ns, buffer_ns;
static unsigned overhead = 14;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t recv_errors, enobufs, wakeups;
static int last_payload_dir = -1;
static volatile sig_atomic_t stop_flag;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double rnd(void) /* xorshift64*: uniform in [0, 1) */
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0);
}

static void reset_counters(void)
{
	for (int i = 0; i < 2; i++) {
		struct dir *d = &dirs[i];
		d->in_pkts = d->in_bytes = d->out_pkts = d->out_bytes = 0;
		d->drop_loss = d->drop_buffer = d->drop_ring = d->syns = d->bad = 0;
		d->payload_pkts = d->turns = 0;
		d->win_start_ns = d->win_bytes = 0;
		d->peak_bps = 0;
		d->first_in_ns = d->first_out_ns = d->last_out_ns = 0;
		d->late_max_ns = d->late_sum_ns = d->late_over_1ms = d->qdelay_max_ns = 0;
		d->held_max = d->tail - d->head;
	}
	recv_errors = enobufs = wakeups = 0;
	last_payload_dir = -1;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
	struct dir *d = data;
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	unsigned char *payload = NULL;
	int len = nfq_get_payload(nfa, &payload);
	uint64_t t = now_ns();
	uint32_t id;
	unsigned ip_len = 0;

	(void)msg;
	if (!ph)
		return 0;
	id = ntohl(ph->packet_id);
	if (len >= 20 && (payload[0] >> 4) == 4) {
		unsigned ihl = (payload[0] & 0x0fu) * 4u;
		ip_len = ((unsigned)payload[2] << 8) | payload[3];
		if (payload[9] == 6 && len >= (int)(ihl + 14)) {
			unsigned doff = (payload[ihl + 12] >> 4) * 4u;
			int me = (int)(d - dirs);
			/* TCP SYN without ACK: a new connection */
			if ((payload[ihl + 13] & 0x12) == 0x02)
				d->syns++;
			/* data (not a bare ACK): count who speaks after whom, a proxy for request/response round trips */
			if (ip_len > ihl + doff) {
				d->payload_pkts++;
				if (last_payload_dir >= 0 && last_payload_dir != me)
					d->turns++;
				last_payload_dir = me;
			}
		}
	}
	if (ip_len == 0) { /* not IPv4 or no length: pass it untouched */
		d->bad++;
		return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
	}
	if (!d->in_pkts)
		d->first_in_ns = t;
	d->in_pkts++;
	d->in_bytes += ip_len;

	if (loss_p > 0 && rnd() < loss_p) {
		d->drop_loss++;
		return nfq_set_verdict(qh, id, NF_DROP, 0, NULL);
	}
	double start = d->link_free_ns > (double)t ? d->link_free_ns : (double)t;
	double qdelay = start - (double)t;
	if (qdelay > buffer_ns) {
		d->drop_buffer++;
		return nfq_set_verdict(qh, id, NF_DROP, 0, NULL);
	}
	if (d->tail - d->head >= RING_SIZE) {
		d->drop_ring++;
		return nfq_set_verdict(qh, id, NF_DROP, 0, NULL);
	}
	d->link_free_ns = start + (double)(ip_len + overhead) * 8.0 * 1e9 / rate_bps;
	if ((uint64_t)qdelay > d->qdelay_max_ns)
		d->qdelay_max_ns = (uint64_t)qdelay;
	d->ring[d->tail % RING_SIZE] = (struct held){id, ip_len, (uint64_t)(d->link_free_ns + delay_ns)};
	d->tail++;
	if (d->tail - d->head > d->held_max)
		d->held_max = d->tail - d->head;
	return 0;
}

/* Accept every held packet whose time has come; returns ns until the next one is due (or -1). */
static int64_t release_due(void)
{
	uint64_t t = now_ns();
	int64_t next = -1;
	for (int i = 0; i < 2; i++) {
		struct dir *d = &dirs[i];
		uint32_t last = 0, n = 0;
		while (d->head != d->tail) {
			struct held *h = &d->ring[d->head % RING_SIZE];
			if (h->due_ns > t)
				break;
			uint64_t late = t - h->due_ns;
			if (late > d->late_max_ns)
				d->late_max_ns = late;
			d->late_sum_ns += late;
			if (late > 1000000)
				d->late_over_1ms++;
			last = h->id;
			d->out_bytes += h->len;
			if (!d->win_start_ns)
				d->win_start_ns = t;
			if (t - d->win_start_ns >= 100000000ull) {
				double bps = d->win_bytes * 8e9 / (double)(t - d->win_start_ns);
				if (bps > d->peak_bps)
					d->peak_bps = bps;
				d->win_start_ns = t;
				d->win_bytes = 0;
			}
			d->win_bytes += h->len + overhead;
			n++;
			d->head++;
		}
		if (n) {
			if (!d->out_pkts)
				d->first_out_ns = t;
			d->out_pkts += n;
			d->last_out_ns = t;
			nfq_set_verdict_batch(d->qh, last, NF_ACCEPT);
		}
		if (d->head != d->tail) {
			int64_t wait = (int64_t)(d->ring[d->head % RING_SIZE].due_ns - t);
			if (next < 0 || wait < next)
				next = wait;
		}
	}
	return next;
}

static void print_stats(void)
{
	printf("{\"wakeups\": %" PRIu64 ", \"recv_errors\": %" PRIu64 ", \"enobufs\": %" PRIu64 ", \"loss\": %.6f, "
	       "\"rate_bps\": %.0f, \"delay_ms\": %.3f, \"buffer_ms\": %.3f, \"overhead\": %u",
	       wakeups, recv_errors, enobufs, loss_p, rate_bps, delay_ns / 1e6, buffer_ns / 1e6, overhead);
	for (int i = 0; i < 2; i++) {
		struct dir *d = &dirs[i];
		printf(", \"%s\": {\"in_pkts\": %" PRIu64 ", \"in_bytes\": %" PRIu64 ", \"out_bytes\": %" PRIu64
		       ", \"out_pkts\": %" PRIu64 ", \"held\": %u, \"held_max\": %" PRIu64 ", \"drop_loss\": %" PRIu64
		       ", \"drop_buffer\": %" PRIu64 ", \"drop_ring\": %" PRIu64 ", \"syns\": %" PRIu64
		       ", \"not_ipv4\": %" PRIu64 ", \"payload_pkts\": %" PRIu64 ", \"turns\": %" PRIu64
		       ", \"first_in_ns\": %" PRIu64 ", \"first_out_ns\": %" PRIu64
		       ", \"last_out_ns\": %" PRIu64 ", \"late_max_us\": %.1f, \"late_mean_us\": %.1f"
		       ", \"late_over_1ms\": %" PRIu64 ", \"qdelay_max_ms\": %.3f, \"peak_mbps\": %.1f}",
		       d->name, d->in_pkts, d->in_bytes, d->out_bytes, d->out_pkts, d->tail - d->head, d->held_max,
		       d->drop_loss, d->drop_buffer, d->drop_ring, d->syns, d->bad, d->payload_pkts, d->turns, d->first_in_ns, d->first_out_ns,
		       d->last_out_ns, d->late_max_ns / 1e3, d->out_pkts ? d->late_sum_ns / 1e3 / d->out_pkts : 0.0,
		       d->late_over_1ms, d->qdelay_max_ns / 1e6, d->peak_bps / 1e6);
	}
	printf(", \"now_ns\": %" PRIu64 "}\n", now_ns());
	fflush(stdout);
}

/* Returns 0 to go on, 1 to quit. */
static int handle_command(char *line)
{
	double p;
	line[strcspn(line, "\r\n")] = 0;
	if (sscanf(line, "loss %lf", &p) == 1 && p >= 0 && p <= 1) {
		loss_p = p;
		puts("ok");
	} else if (sscanf(line, "delay %lf", &p) == 1 && p >= 0) {
		delay_ns = p * 1e6;
		puts("ok");
	} else if (!strcmp(line, "stats")) {
		print_stats();
		return 0;
	} else if (!strcmp(line, "reset")) {
		reset_counters();
		puts("ok");
	} else if (!strcmp(line, "quit")) {
		return 1;
	} else {
		printf("error: unknown command '%s'\n", line);
	}
	fflush(stdout);
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [--queues A2B,B2A] [--delay-ms 90] [--rate-mbit 1000] [--buffer-ms 20] [--loss 0]\n"
		"          [--overhead 14] [--queue-maxlen 100000] [--seed N] [--rt PRIO] [--cpu N]\n",
		prog);
	exit(2);
}

int main(int argc, char **argv)
{
	unsigned qnum[2] = {0, 1};
	unsigned maxlen = 100000;
	double delay_ms = 90, rate_mbit = 1000, buffer_ms = 20;
	uint64_t seed = 0;
	int rt_prio = 0, cpu = -1;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			usage(argv[0]);
		if (!strcmp(a, "--queues") && sscanf(v, "%u,%u", &qnum[0], &qnum[1]) == 2)
			;
		else if (!strcmp(a, "--delay-ms"))
			delay_ms = atof(v);
		else if (!strcmp(a, "--rate-mbit"))
			rate_mbit = atof(v);
		else if (!strcmp(a, "--buffer-ms"))
			buffer_ms = atof(v);
		else if (!strcmp(a, "--loss"))
			loss_p = atof(v);
		else if (!strcmp(a, "--overhead"))
			overhead = (unsigned)atoi(v);
		else if (!strcmp(a, "--queue-maxlen"))
			maxlen = (unsigned)atoi(v);
		else if (!strcmp(a, "--seed"))
			seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--rt"))
			rt_prio = atoi(v);
		else if (!strcmp(a, "--cpu"))
			cpu = atoi(v);
		else
			usage(argv[0]);
		i++;
	}
	if (rate_mbit <= 0 || delay_ms < 0 || buffer_ms < 0 || loss_p < 0 || loss_p > 1)
		usage(argv[0]);
	rate_bps = rate_mbit * 1e6;
	delay_ns = delay_ms * 1e6;
	buffer_ns = buffer_ms * 1e6;
	if (seed)
		rng_state ^= seed * 0xbf58476d1ce4e5b9ull;
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake up on time, not up to 50 us late */
	if (cpu >= 0) {
		/* this process only: with the endpoints' receive work steered to the other CPUs (RPS), the packets it
		 * releases are processed there, not inside its own verdict calls */
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set) < 0)
			perror("sched_setaffinity (running unpinned)");
	}
	if (rt_prio > 0) {
		/* SCHED_FIFO for this process only: the "network" must not wait behind other work on a busy machine
		 * (it sleeps in ppoll between packets, and the kernel's RT throttling still bounds it) */
		struct sched_param sp = {.sched_priority = rt_prio};
		if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
			perror("sched_setscheduler (running unprioritised)");
	}

	struct nfq_handle *h = nfq_open();
	if (!h) {
		perror("nfq_open");
		return 1;
	}
	dirs[0].name = "a2b";
	dirs[1].name = "b2a";
	for (int i = 0; i < 2; i++) {
		dirs[i].ring = calloc(RING_SIZE, sizeof(struct held));
		if (!dirs[i].ring) {
			perror("calloc");
			return 1;
		}
		dirs[i].qh = nfq_create_queue(h, qnum[i], on_packet, &dirs[i]);
		if (!dirs[i].qh) {
			fprintf(stderr, "nfq_create_queue %u: %s\n", qnum[i], strerror(errno));
			return 1;
		}
		if (nfq_set_mode(dirs[i].qh, NFQNL_COPY_PACKET, COPY_RANGE) < 0) {
			perror("nfq_set_mode");
			return 1;
		}
		if (nfq_set_queue_maxlen(dirs[i].qh, maxlen) < 0)
			perror("nfq_set_queue_maxlen");
	}
	int fd = nfq_fd(h);
	/* SO_RCVBUFFORCE: a socket option of this socket only, not the host's net.core.rmem_max */
	nfnl_rcvbufsiz(nfq_nfnlh(h), 64u << 20);
	int one = 1;
	setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));

	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	puts("ready");
	fflush(stdout);

	/* recvmmsg: up to BATCH queued packets per system call (each message is ~200 bytes: COPY_RANGE + headers) */
	enum { BATCH = 64, SLOT = 8192 };
	static char bufs[BATCH][SLOT] __attribute__((aligned(8)));
	static struct iovec iov[BATCH];
	static struct mmsghdr msgs[BATCH];
	for (int i = 0; i < BATCH; i++) {
		iov[i] = (struct iovec){.iov_base = bufs[i], .iov_len = SLOT};
		msgs[i].msg_hdr = (struct msghdr){.msg_iov = &iov[i], .msg_iovlen = 1};
	}
	char line[256];
	size_t line_len = 0;
	int stdin_open = 1;
	while (!stop_flag) {
		int64_t wait = release_due();
		struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
		struct timespec ts, *tsp = NULL;
		if (wait >= 0) {
			ts.tv_sec = wait / 1000000000;
			ts.tv_nsec = wait % 1000000000;
			tsp = &ts;
		}
		int n = ppoll(pfd, stdin_open ? 2 : 1, tsp, NULL);
		wakeups++;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("ppoll");
			break;
		}
		if (pfd[0].revents & POLLIN) {
			/* drain the socket, but come back to release held packets at least every 4 batches */
			for (int k = 0; k < 4; k++) {
				int got = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
				if (got < 0) {
					if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
						break;
					if (errno == ENOBUFS)
						enobufs++;
					else
						recv_errors++;
					continue;
				}
				for (int i = 0; i < got; i++)
					nfq_handle_packet(h, bufs[i], (int)msgs[i].msg_len);
				if (got < BATCH)
					break;
			}
		}
		if (stdin_open && (pfd[1].revents & (POLLIN | POLLHUP))) {
			ssize_t r = read(0, line + line_len, sizeof(line) - 1 - line_len);
			if (r <= 0) {
				stdin_open = 0;
				break;
			}
			line_len += (size_t)r;
			line[line_len] = 0;
			char *nl;
			int quit = 0;
			while ((nl = strchr(line, '\n'))) {
				*nl = 0;
				quit |= handle_command(line);
				line_len -= (size_t)(nl + 1 - line);
				memmove(line, nl + 1, line_len + 1);
			}
			if (line_len >= sizeof(line) - 1)
				line_len = 0;
			if (quit)
				break;
		}
	}
	/* Let what is still held go (the namespaces are about to be deleted anyway). */
	for (int i = 0; i < 2; i++) {
		if (dirs[i].head != dirs[i].tail)
			nfq_set_verdict_batch(dirs[i].qh, dirs[i].ring[(dirs[i].tail - 1) % RING_SIZE].id, NF_ACCEPT);
		nfq_destroy_queue(dirs[i].qh);
		free(dirs[i].ring);
	}
	nfq_close(h);
	return 0;
}
