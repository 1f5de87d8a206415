/*
 * What the steward's two files share: steward.c serves a sealed sandbox
 * as its pid 1; setup.c builds and seals one first, when the daemon starts
 * this program as the sandbox's init (argv[0] INIT_ARG0).
 */
#ifndef IRONCLAW_STEWARD_H
#define IRONCLAW_STEWARD_H

#include <stddef.h>

/* argv[0] of this program started as a sandbox's init (native's
 * stewardInitArg0 on the Go side). */
#define INIT_ARG0 "ironclaw-steward-init"

#define MAX_PACKET (128 << 10) /* wire.MaxPacket */
#define MAX_FDS 64             /* wire's maxFDs */

/* pid 1's descriptors: the control socket, this program, the Go agent,
 * and pid 1's oom_score_adj with the two values it switches between. */
extern int ctl, self_fd, agent_fd, oom_fd;
extern char oom_own[16], oom_workload[16];
extern char pkt[MAX_PACKET + 1];

void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void errtext(int e, char *out, size_t n);
void send_packet(const char *b, size_t n, const int *fds, int nfds);
void reply_failed(unsigned long long id, const char *code, int err, const char *msg);

/* init_sandbox builds the sandbox the daemon's plan describes (package
 * setup), seals this process and reports ready; it returns with the
 * descriptors above set, or reports the failure and exits. */
void init_sandbox(void);

#endif
