/* webserver: the stand-in for the nginx and httpd test images. It serves one
 * page on a port (-p N, default 80), writes /var/run/nginx.pid when called as
 * nginx and shows "nginx: master process" in its argv as nginx does, says
 * its name on stderr (the log specs look for it), and exits on TERM. */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static const char page[] =
	"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n"
	"<html><body><h1>Welcome!</h1></body></html>\n";

int main(int argc, char **argv) {
	const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	int port = 80;
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-p") == 0)
			port = atoi(argv[i + 1]);
	if (strcmp(name, "nginx") == 0) {
		/* Re-run under nginx's process title, keeping the arguments. */
		char *args[argc + 1];
		args[0] = "nginx: master process nginx";
		for (int i = 1; i < argc; i++)
			args[i] = argv[i];
		args[argc] = NULL;
		/* By its path, not /proc/self/exe: pidof looks for comm "nginx". */
		char self[4096];
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n < 0) {
			perror("/proc/self/exe");
			return 1;
		}
		self[n] = 0;
		execv(self, args);
		perror("execv");
		return 1;
	}
	if (strncmp(argv[0], "nginx:", 6) == 0) {
		FILE *f = fopen("/var/run/nginx.pid", "w");
		if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) {
			perror("/var/run/nginx.pid");
			return 1;
		}
		name = "nginx";
	}
	signal(SIGTERM, stop);
	signal(SIGINT, stop);
	signal(SIGPIPE, SIG_IGN);
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 64) < 0) {
		perror("listen");
		return 1;
	}
	fprintf(stderr, "%s: serving on port %d\n", name, port);
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0)
			continue;
		char buf[4096];
		if (read(c, buf, sizeof buf) >= 0 && write(c, page, sizeof page - 1) < 0)
			perror("write");
		close(c);
	}
}
