/* The clocks' variables and what is not inline (common/clock.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"

int64_t tsec__wall_skew_ms;
_Atomic int64_t tsec__clock_shift_ms;
_Atomic bool tsec__clock_virtual;

static char boot_id[40];
static pthread_once_t boot_once = PTHREAD_ONCE_INIT;

static void boot_read(void)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
	size_t n = 0;

	if (f) {
		n = fread(boot_id, 1, sizeof(boot_id) - 1, f);
		fclose(f);
	}
	while (n && (boot_id[n - 1] == '\n' || boot_id[n - 1] == ' '))
		n--;
	boot_id[n] = '\0';
	/* Only what a boot id is made of: it goes into lock files. */
	for (size_t i = 0; i < n; i++)
		if (!((boot_id[i] >= '0' && boot_id[i] <= '9') ||
		      (boot_id[i] >= 'a' && boot_id[i] <= 'f') || boot_id[i] == '-'))
			boot_id[0] = '\0';
	/* No id: every boot reads the same, and a lease of an earlier one
	 * lasts at most its own length on this boot's clock. */
	if (!boot_id[0])
		strcpy(boot_id, "-");
}

const char *tsec__boot_id(void)
{
	pthread_once(&boot_once, boot_read);
	return boot_id;
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
