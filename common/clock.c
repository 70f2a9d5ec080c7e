/* The clocks' variables and what is not inline (common/clock.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

int64_t tsec__wall_skew_ms;
_Atomic int64_t tsec__clock_shift_ms;
_Atomic bool tsec__clock_virtual;

/*
 * Which boot this process runs in, and how its boot clock reads against
 * the machine's: read once.  The file store's leases are judged on the
 * boot clock with the boot's id, so a process that cannot tell either
 * must not judge them (issue 48: under systemd's ProcSubset=pid the id
 * read as "-", every boot looked the same, and a lock left by a boot
 * that had run 30 days stayed held about 30 days after a reboot; a
 * broker in a time namespace read another boot clock and took a live
 * lock at once).
 */
static struct {
	char id[40];                 /* "" when unknown */
	int64_t offset_ms;           /* this time namespace's boot clock, ahead of the host's */
	char why[200];               /* why either is unknown */
} boot;
static pthread_once_t boot_once = PTHREAD_ONCE_INIT;

/* The boot id: 36 characters of lower-case hex and dashes. */
static void boot_id_read(void)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
	size_t n = 0;

	if (!f) {
		snprintf(boot.why, sizeof(boot.why), "/proc/sys/kernel/random/boot_id: %s "
			 "(a sandbox hiding /proc/sys, such as systemd's ProcSubset=pid?)",
			 strerror(errno));
		return;
	}
	n = fread(boot.id, 1, sizeof(boot.id) - 1, f);
	fclose(f);
	while (n && (boot.id[n - 1] == '\n' || boot.id[n - 1] == ' '))
		n--;
	boot.id[n] = '\0';
	/* Only what a boot id is made of: it goes into lock files. */
	for (size_t i = 0; i < n; i++)
		if (!((boot.id[i] >= '0' && boot.id[i] <= '9') ||
		      (boot.id[i] >= 'a' && boot.id[i] <= 'f') || boot.id[i] == '-'))
			n = 0;
	if (n != 36) {
		boot.id[0] = '\0';
		snprintf(boot.why, sizeof(boot.why), "/proc/sys/kernel/random/boot_id does not "
			 "hold a boot id");
	}
}

/*
 * The boot clock's offset in this process's time namespace (time
 * namespaces, Linux 5.6: /proc/self/timens_offsets, "boottime SECS
 * NSECS").  The file shows the namespace this process's children get; a
 * process whose own namespace differs (it unshared one) cannot know its
 * own offset from it.  No file (a kernel without time namespaces): 0.
 */
static void boot_offset_read(void)
{
	char own[64] = "", kids[64] = "", line[128];
	ssize_t a = readlink("/proc/self/ns/time", own, sizeof(own) - 1);
	ssize_t k = readlink("/proc/self/ns/time_for_children", kids, sizeof(kids) - 1);
	long long secs, nsecs;
	FILE *f;

	if (a < 0 && errno == ENOENT)
		return;
	if (a < 0 || k < 0 || strcmp(own, kids)) {
		snprintf(boot.why, sizeof(boot.why), "cannot tell this process's time namespace "
			 "(/proc/self/ns/time%s)", a < 0 || k < 0 ? " unreadable" : " differs from "
			 "its children's");
		return;
	}
	if (!(f = fopen("/proc/self/timens_offsets", "re"))) {
		snprintf(boot.why, sizeof(boot.why), "/proc/self/timens_offsets: %s",
			 strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "boottime %lld %lld", &secs, &nsecs) == 2)
			boot.offset_ms = secs * 1000 + nsecs / 1000000;
	fclose(f);
}

static void boot_read(void)
{
	boot_id_read();
	if (boot.id[0])
		boot_offset_read();
	if (boot.why[0])
		boot.id[0] = '\0';
}

const char *tsec__boot_id(void)
{
	pthread_once(&boot_once, boot_read);
	return boot.id;
}

int tsec__boot_known(char *why, size_t n)
{
	pthread_once(&boot_once, boot_read);
	if (!boot.id[0] && why)
		snprintf(why, n, "%s", boot.why);
	return boot.id[0] ? 0 : -1;
}

int64_t tsec__boot_ms(void)
{
	struct timespec ts;

	pthread_once(&boot_once, boot_read);
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - boot.offset_ms +
	       tsec__clock_shift();
}

void tsec__sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void tsec__nap_ns(uint64_t ns)
{
	if (!ns)
		return;
	if (atomic_load_explicit(&tsec__clock_virtual, memory_order_relaxed)) {
		tsec__clock_advance((int64_t)((ns + 999999u) / 1000000u));
		return;
	}
	tsec__sleep_ns(ns);
}

void tsec__nap_ms(int64_t ms)
{
	if (ms > 0)
		tsec__nap_ns((uint64_t)ms * 1000000u);
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian), as in "days from
 * civil" arithmetic. */
static int64_t days_of(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

int64_t tsec__utc_parse(const char *s)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int v[6] = { 0 }, f = 0;
	int64_t y;

	if (!s)
		return -1;
	for (size_t i = 0; i < sizeof(shape); i++) {
		if (shape[i] == 'd') {
			if (s[i] < '0' || s[i] > '9')
				return -1;
			v[f] = v[f] * 10 + (s[i] - '0');
		} else if (s[i] != shape[i]) {
			return -1;
		} else if (shape[i] != 'Z' && shape[i] != '\0') {
			f++;
		}
	}
	y = v[0];
	if (v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > mdays[v[1] - 1] || v[3] > 23 ||
	    v[4] > 59 || v[5] > 59 ||
	    (v[1] == 2 && v[2] == 29 && (y % 4 || (y % 100 == 0 && y % 400))))
		return -1;
	return days_of(y, v[1], v[2]) * 86400 + v[3] * 3600 + v[4] * 60 + v[5];
}
