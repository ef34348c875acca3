/*
 * hold.c SOCKET N BYTES: a tenant that holds connections (issue 50 item 7). Opens N
 * connections to SOCKET and writes BYTES of a line that never ends on each (a write the agent
 * does not take within 200 ms, or on a connection it closed, is given up); prints
 * "held <connections open> <bytes written>", then keeps them until the checkpoint "end".
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
	const char *go = getenv("KFDQ_TEST_GO");
	char tagged[4096];
	long n, bytes, held = 0, written = 0;
	char *line;

	if (argc < 4) {
		fprintf(stderr, "usage: hold SOCKET N BYTES\n");
		return 2;
	}
	struct rlimit rl;

	signal(SIGPIPE, SIG_IGN);
	/* Descriptors for all of them (up to the hard limit). */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	n = atol(argv[2]);
	bytes = atol(argv[3]);
	line = malloc((size_t)bytes);
	if (!line)
		return 2;
	memset(line, 'x', (size_t)bytes);
	strncpy(a.sun_path, argv[1], sizeof(a.sun_path) - 1);
	for (long i = 0; i < n; i++) {
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		long off = 0;

		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
			if (s >= 0)
				close(s);
			continue;
		}
		held++;
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		while (off < bytes) {
			ssize_t w = write(s, line + off, (size_t)(bytes - off));

			if (w <= 0)
				break;
			off += w;
		}
		written += off;
	}
	printf("held %ld %ld\n", held, written);
	fflush(stdout);
	snprintf(tagged, sizeof(tagged), "%s-end", go ? go : "");
	for (int i = 0; go && i < 60000 / 5 && access(tagged, F_OK) != 0; i++)
		usleep(5000);
	return 0;
}
