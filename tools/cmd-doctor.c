// SPDX-License-Identifier: MIT
/*
 * cmd-doctor.c - `kt doctor`: checks the settings of a bare-metal box that
 * slow kt down, explains each and names the command that fixes it.
 * Exit status 0 only when no check found a slowdown.
 */
#include <getopt.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <kt/kt.h>

#include "tools/cmd.h"
#include "tools/json.h"

enum dr_status { DR_OK, DR_INFO, DR_SLOW };
static const char *const dr_names[] = { "ok", "info", "slow" };

struct dr_check {
	const char *name;
	enum dr_status st;
	char detail[512];
	char fix[256];
};

#define DR_MAX 16
static struct dr_check checks[DR_MAX];
static unsigned int n_checks;

static __attribute__((format(printf, 3, 4)))
struct dr_check *dr_add(const char *name, enum dr_status st,
			const char *fmt, ...)
{
	struct dr_check *c = &checks[n_checks < DR_MAX - 1 ? n_checks++ : n_checks];
	va_list ap;

	c->name = name;
	c->st = st;
	va_start(ap, fmt);
	vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
	va_end(ap);
	c->fix[0] = '\0';
	return c;
}

static __attribute__((format(printf, 2, 3)))
void dr_fix(struct dr_check *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->fix, sizeof(c->fix), fmt, ap);
	va_end(ap);
}

/* First line of a sysfs/procfs file, without its newline; "" when absent. */
static const char *read_line(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	if (!f)
		return buf;
	if (!fgets(buf, (int)n, f))
		buf[0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
	return buf;
}

static long read_long(const char *path, long dflt)
{
	char buf[64];

	read_line(path, buf, sizeof(buf));
	return buf[0] ? strtol(buf, NULL, 10) : dflt;
}

/* A "Key:\tvalue" line of /proc/self/status. */
static const char *proc_status(const char *key, char *buf, size_t n)
{
	char line[256];
	size_t kl = strlen(key);
	FILE *f = fopen("/proc/self/status", "r");

	buf[0] = '\0';
	if (!f)
		return buf;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			snprintf(buf, n, "%s", line + kl + 1 +
				 strspn(line + kl + 1, " \t"));
			buf[strcspn(buf, "\n")] = '\0';
			break;
		}
	fclose(f);
	return buf;
}

static void check_isa(const struct kt_sysinfo *si)
{
	struct dr_check *c;

	if (si->best_isa == KT_ISA_SCALAR) {
		c = dr_add("isa", DR_SLOW, "no AVX2: kt runs its scalar oracle "
			   "kernels, many times slower than SIMD");
		dr_fix(c, "run on a CPU with AVX2 (or AVX-512/AMX)");
		return;
	}
	dr_add("isa", DR_OK, "kernels: %s", kt_isa_name(si->best_isa));
}

static void check_hugepages(const struct kt_sysinfo *si, const char *model,
			    uint64_t need)
{
	uint64_t per_node = si->n_nodes ? need / si->n_nodes : need;
	char path[160], list[256] = "";
	uint32_t i, j, short_nodes = 0;
	size_t len = 0;
	struct dr_check *c;

	for (i = 0; i < si->n_nodes; i++) {
		uint64_t bytes = 0;

		for (j = 0; j < si->n_hpage_sizes; j++) {
			long fr;

			snprintf(path, sizeof(path), "/sys/devices/system/node/"
				 "node%d/hugepages/hugepages-%llukB/free_hugepages",
				 si->node_ids[i],
				 (unsigned long long)si->hpage_kb[j]);
			fr = read_long(path, 0);
			bytes += (uint64_t)(fr > 0 ? fr : 0) * si->hpage_kb[j] * 1024;
		}
		if (need && bytes < per_node)
			short_nodes++;
		if (len < sizeof(list))
			len += (size_t)snprintf(list + len, sizeof(list) - len,
						"%snode %d %.1f GiB", i ? ", " : "",
						si->node_ids[i], bytes / 1073741824.0);
	}
	if (!need) {
		c = dr_add("hugepages", DR_INFO, "free: %s (no --model given "
			   "to size against; without hugepages weights use "
			   "transparent hugepages)", list[0] ? list : "none");
		dr_fix(c, "scripts/setup-hugepages.sh --for MODEL.ktw");
		return;
	}
	if (short_nodes) {
		c = dr_add("hugepages", DR_SLOW, "%s needs %.1f GiB per node, "
			   "free: %s; %u node(s) short: weights fall back to "
			   "transparent hugepages (TLB misses, slower loads)",
			   model, per_node / 1073741824.0, list, short_nodes);
		dr_fix(c, "scripts/setup-hugepages.sh --for %s", model);
		return;
	}
	dr_add("hugepages", DR_OK, "%s needs %.1f GiB per node, free: %s",
	       model, per_node / 1073741824.0, list);
}

static void check_thp(void)
{
	char buf[128];
	struct dr_check *c;

	read_line("/sys/kernel/mm/transparent_hugepage/enabled", buf,
		  sizeof(buf));
	if (!buf[0]) {
		dr_add("thp", DR_INFO, "transparent hugepages: not offered by "
		       "this kernel");
		return;
	}
	if (strstr(buf, "[never]")) {
		c = dr_add("thp", DR_SLOW, "transparent hugepages are off "
			   "(%s): weights without reserved hugepages sit in 4 "
			   "KiB pages", buf);
		dr_fix(c, "echo madvise > /sys/kernel/mm/transparent_hugepage/"
		       "enabled");
		return;
	}
	dr_add("thp", DR_OK, "transparent hugepages: %s (kt asks with "
	       "madvise)", buf);
}

static void check_governor(void)
{
	char path[96], buf[64], first[64] = "";
	long n = sysconf(_SC_NPROCESSORS_CONF), i, slow = 0, seen = 0;
	struct dr_check *c;

	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%ld/"
			 "cpufreq/scaling_governor", i);
		if (!read_line(path, buf, sizeof(buf))[0])
			continue;
		seen++;
		if (strcmp(buf, "performance")) {
			if (!slow++)
				snprintf(first, sizeof(first), "%s", buf);
		}
	}
	if (!seen) {
		dr_add("governor", DR_INFO, "no cpufreq governor exposed (a VM, "
		       "or the firmware controls the frequency)");
		return;
	}
	if (slow) {
		c = dr_add("governor", DR_SLOW, "%ld of %ld CPUs use the '%s' "
			   "governor: decode steps are short bursts that such "
			   "governors answer late", slow, seen, first);
		dr_fix(c, "cpupower frequency-set -g performance");
		return;
	}
	dr_add("governor", DR_OK, "all %ld CPUs use 'performance'", seen);
}

/* A sysfs CPU list ("2-5,8") into @set; false when empty or malformed. */
static bool parse_cpulist(const char *s, cpu_set_t *set)
{
	char *end;

	CPU_ZERO(set);
	while (*s) {
		long a = strtol(s, &end, 10), b = a;

		if (end == s || a < 0)
			return false;
		s = end;
		if (*s == '-') {
			b = strtol(s + 1, &end, 10);
			if (end == s + 1 || b < a)
				return false;
			s = end;
		}
		for (; a <= b && a < CPU_SETSIZE; a++)
			CPU_SET(a, set);
		if (*s == ',')
			s++;
		else if (*s)
			return false;
	}
	return CPU_COUNT(set) > 0;
}

static void check_cores(const struct kt_sysinfo *si)
{
	char smt[32], iso[128], nohz[128];
	unsigned int cores = 0, i;
	cpu_set_t set;
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int allowed = -1;
	struct dr_check *c;

	for (i = 0; i < si->n_nodes; i++)
		cores += si->node_cores[i];
	if (!sched_getaffinity(0, sizeof(set), &set))
		allowed = CPU_COUNT(&set);
	read_line("/sys/devices/system/cpu/smt/active", smt, sizeof(smt));
	read_line("/sys/devices/system/cpu/isolated", iso, sizeof(iso));
	read_line("/sys/devices/system/cpu/nohz_full", nohz, sizeof(nohz));
	if (!strcmp(nohz, "(null)"))
		nohz[0] = '\0';
	if (allowed >= 0 && allowed < online) {
		cpu_set_t isol, both;

		/* taskset onto the isolcpus set is the tuned setup, not a limit */
		if (parse_cpulist(iso, &isol)) {
			CPU_AND(&both, &set, &isol);
			if (CPU_EQUAL(&both, &set)) {
				dr_add("cores", DR_OK, "running on %d isolated "
				       "CPUs (isolcpus %s; nohz_full: %s); SMT %s",
				       allowed, iso, nohz[0] ? nohz : "none",
				       smt[0] ? smt : "unknown");
				return;
			}
		}
		c = dr_add("cores", DR_SLOW, "this process may use %d of %ld "
			   "online CPUs (affinity or cgroup cpuset): kt's "
			   "workers share them", allowed, online);
		dr_fix(c, "run kt without taskset/numactl --physcpubind "
		       "limits, or widen the cgroup's cpuset.cpus");
		return;
	}
	dr_add("cores", DR_OK, "workers take one per physical core: %u "
	       "cores of %ld CPUs (SMT %s); isolcpus: %s; nohz_full: %s",
	       cores, online, smt[0] ? smt : "unknown", iso[0] ? iso : "none",
	       nohz[0] ? nohz : "none");
}

static void check_numa_balancing(const struct kt_sysinfo *si)
{
	long v = read_long("/proc/sys/kernel/numa_balancing", -1);
	struct dr_check *c;

	if (v < 0) {
		dr_add("numa_balancing", DR_INFO, "automatic NUMA balancing: "
		       "not in this kernel");
		return;
	}
	if (v && si->n_nodes > 1) {
		c = dr_add("numa_balancing", DR_SLOW, "automatic NUMA "
			   "balancing is on: the kernel unmaps and migrates "
			   "the weights kt placed per node");
		dr_fix(c, "sysctl -w kernel.numa_balancing=0");
		return;
	}
	dr_add("numa_balancing", DR_OK, "automatic NUMA balancing: %s%s",
	       v ? "on" : "off", v ? " (harmless with one node)" : "");
}

static void check_memlock(uint64_t need)
{
	char cap[64];
	struct rlimit rl;
	unsigned long long eff;
	struct dr_check *c;
	uint64_t want = need ? need : 64ull << 20;

	proc_status("CapEff", cap, sizeof(cap));
	eff = strtoull(cap, NULL, 16);
	if (eff & (1ull << 14)) {	/* CAP_IPC_LOCK: no limit applies */
		dr_add("memlock", DR_OK, "CAP_IPC_LOCK held: registered "
		       "buffers are not limited");
		return;
	}
	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur >= want) {
		dr_add("memlock", DR_OK, "memlock limit %s", rl.rlim_cur ==
		       RLIM_INFINITY ? "unlimited" : "is enough");
		return;
	}
	c = dr_add("memlock", DR_SLOW, "memlock limit %llu KiB < %llu KiB: "
		   "loads cannot pin io_uring registered buffers and fall "
		   "back to plain reads", (unsigned long long)rl.rlim_cur >> 10,
		   (unsigned long long)want >> 10);
	dr_fix(c, "ulimit -l unlimited (or memlock in "
	       "/etc/security/limits.conf, LimitMEMLOCK= for a service)");
}

static void check_io_uring(const struct kt_sysinfo *si)
{
	long dis = read_long("/proc/sys/kernel/io_uring_disabled", 0);
	char secc[16];
	struct dr_check *c;

	if (si->io_uring) {
		dr_add("io_uring", DR_OK, "io_uring available");
		return;
	}
	proc_status("Seccomp", secc, sizeof(secc));
	if (dis) {
		c = dr_add("io_uring", DR_SLOW, "io_uring is disabled "
			   "(kernel.io_uring_disabled = %ld): model loads use "
			   "pread", dis);
		dr_fix(c, "sysctl -w kernel.io_uring_disabled=0");
	} else if (!strcmp(secc, "2")) {
		c = dr_add("io_uring", DR_SLOW, "io_uring_setup() is refused "
			   "and a seccomp filter is active (a container "
			   "profile?): model loads use pread");
		dr_fix(c, "allow io_uring_setup, io_uring_enter and "
		       "io_uring_register in the container's seccomp profile");
	} else {
		c = dr_add("io_uring", DR_SLOW, "io_uring_setup() fails (old "
			   "kernel or memlock): model loads use pread");
		dr_fix(c, "a kernel with io_uring (5.6 or later)");
	}
}

static void check_gpu(const struct kt_sysinfo *si)
{
	if (!si->cuda_driver) {
		dr_add("gpu", DR_INFO, "no CUDA driver: kt runs on the CPU only");
		return;
	}
	dr_add("gpu", DR_OK, "CUDA driver %d.%d, %d device(s)",
	       si->cuda_version / 1000, si->cuda_version % 1000 / 10,
	       si->cuda_devices);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kt doctor [--model M.ktw] [--json]\n"
		"  check what would slow kt down on this machine: hugepages\n"
		"  per node (against the model), THP, CPU governor, cores and\n"
		"  affinity, NUMA balancing, memlock, io_uring, GPU driver.\n"
		"  Prints the command that fixes each; exit status 0 only when\n"
		"  nothing would slow kt down, 1 otherwise.\n"
		"  --model M.ktw  size the hugepage check for this model\n"
		"  --json         one JSON object on one line\n");
}

static int doctor_main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model = NULL;
	struct kt_sysinfo si;
	uint64_t need = 0;
	bool json = false;
	unsigned int i, slow = 0;
	int opt, ret;

	while ((opt = getopt_long(argc, argv, "m:jh", lo, NULL)) != -1) {
		switch (opt) {
		case 'm': model = optarg; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kt doctor: unexpected argument '%s'\n",
			argv[optind]);
		return 2;
	}
	if (model) {
		struct kt_ktw_info ki;

		ret = kt_ktw_inspect(model, &ki, NULL, 0);
		if (ret) {
			fprintf(stderr, "kt doctor: --model %s: %s\n", model,
				kt_last_error()[0] ? kt_last_error() :
				strerror(-ret));
			return 1;
		}
		need = ki.data_bytes;
	}
	ret = kt_sysinfo_get(&si);
	if (ret) {
		fprintf(stderr, "kt doctor: kt_sysinfo_get: %s\n", strerror(-ret));
		return 1;
	}
	n_checks = 0;
	check_isa(&si);
	check_hugepages(&si, model, need);
	check_thp();
	check_governor();
	check_cores(&si);
	check_numa_balancing(&si);
	check_memlock(need);
	check_io_uring(&si);
	check_gpu(&si);
	for (i = 0; i < n_checks; i++)
		slow += checks[i].st == DR_SLOW;
	if (json) {
		struct jw j;

		jw_begin(&j, stdout);
		jw_bool(&j, "ok", !slow);
		jw_u64(&j, "slow", slow);
		jw_arr(&j, "checks");
		for (i = 0; i < n_checks; i++) {
			jw_obj(&j, NULL);
			jw_str(&j, "name", checks[i].name);
			jw_str(&j, "status", dr_names[checks[i].st]);
			jw_str(&j, "detail", checks[i].detail);
			if (checks[i].fix[0])
				jw_str(&j, "fix", checks[i].fix);
			else
				jw_null(&j, "fix");
			jw_close(&j);
		}
		jw_close(&j);
		jw_end(&j);
	} else {
		for (i = 0; i < n_checks; i++) {
			printf("%-5s %-15s %s\n", dr_names[checks[i].st],
			       checks[i].name, checks[i].detail);
			if (checks[i].fix[0])
				printf("      %-15s fix: %s\n", "", checks[i].fix);
		}
		printf("%s\n", slow ? "kt doctor: some settings slow kt down "
		       "(see 'slow' above)" : "kt doctor: nothing slows kt down");
	}
	return slow ? 1 : 0;
}

KT_COMMAND("doctor", doctor_main,
	   "check what would slow kt down here, and how to fix it");
