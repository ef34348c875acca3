/*
 * topology.c (layer 1): device discovery. GPUs are the nodes of the sysfs topology
 * ($KFDQ_ROOT/sys/class/kfd/kfd/topology/nodes/N) with a non-zero gpu_id,
 * in node order; their properties give the render minor and the CWSR sizes
 * queues are created with. cwsr_size and ctl_stack_size are read from sysfs
 * only (Linux 6.12+ and kfd-emu publish them; the kernel's formula for them
 * lives in kfdq's Rust code, not here): a GPU node without them fails
 * discovery, and with it initialisation (hipErrorNoDevice).
 */
#include "fakehip_internal.h"

/* ------------------------------------------------------------------ */
/* topology                                                           */
/* ------------------------------------------------------------------ */

struct fh_props {
	int have_cwsr, have_ctl;
	uint64_t cwsr_size, ctl_stack_size;
	uint64_t simd_count, simd_per_cu, array_count, simd_arrays_per_engine;
	uint64_t num_xcc, gfx_target_version, drm_render_minor;
};

static int read_u64_file(const char *path, uint64_t *out)
{
	FILE *f = fopen(path, "re");
	unsigned long long v;
	int ok;

	if (!f)
		return -1;
	ok = fscanf(f, "%llu", &v) == 1;
	fclose(f);
	if (!ok)
		return -1;
	*out = v;
	return 0;
}

static int read_props(const char *path, struct fh_props *p)
{
	FILE *f = fopen(path, "re");
	char key[128];
	unsigned long long v;

	if (!f)
		return -1;
	memset(p, 0, sizeof(*p));
	p->num_xcc = 1;
	while (fscanf(f, "%127s %llu", key, &v) == 2) {
		if (!strcmp(key, "cwsr_size")) {
			p->cwsr_size = v;
			p->have_cwsr = 1;
		} else if (!strcmp(key, "ctl_stack_size")) {
			p->ctl_stack_size = v;
			p->have_ctl = 1;
		} else if (!strcmp(key, "simd_count"))
			p->simd_count = v;
		else if (!strcmp(key, "simd_per_cu"))
			p->simd_per_cu = v;
		else if (!strcmp(key, "array_count"))
			p->array_count = v;
		else if (!strcmp(key, "simd_arrays_per_engine"))
			p->simd_arrays_per_engine = v;
		else if (!strcmp(key, "num_xcc"))
			p->num_xcc = v ? v : 1;
		else if (!strcmp(key, "gfx_target_version"))
			p->gfx_target_version = v;
		else if (!strcmp(key, "drm_render_minor"))
			p->drm_render_minor = v;
	}
	fclose(f);
	return 0;
}

/*
 * debug_memory_size: the per-XCC debugger area after the CWSR areas (see
 * q_create). The kernel computes it with the CWSR sizes
 * (kfd_queue_ctx_save_restore_size, docs/kernel-interface.md §3) but does not
 * publish it in sysfs, so fakehip derives it from the node's properties:
 * ALIGN(wave_num * 32, 64), wave_num being the waves the node's CUs hold
 * (32 per CU from gfx10 on; before, 40 per CU and at most 512 per shader
 * engine). The CWSR sizes themselves are never computed here.
 */
static uint32_t debug_memory_size(const struct fh_props *p)
{
	uint64_t xcc = p->num_xcc ? p->num_xcc : 1;
	uint64_t major = p->gfx_target_version / 10000;
	uint64_t cu_num = 0, wave_num;

	if (p->simd_per_cu)
		cu_num = p->simd_count / p->simd_per_cu / xcc;
	if (major >= 10) {
		wave_num = cu_num * 32;
	} else {
		uint64_t se = p->simd_arrays_per_engine ? p->array_count / p->simd_arrays_per_engine : 0;

		wave_num = cu_num * 40;
		if (se * 512 < wave_num)
			wave_num = se * 512;
	}
	return (uint32_t)align_up(wave_num * 32, 64);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int read_topology(void)
{
	char path[PATH_MAX + 128];
	uint32_t ids[256];
	int n = 0;
	DIR *dir;
	struct dirent *de;

	snprintf(path, sizeof(path), "%s/sys/class/kfd/kfd/topology/nodes", G.root);
	dir = opendir(path);
	if (!dir)
		return 0;
	while ((de = readdir(dir)) && n < 256) {
		char *end;
		unsigned long v = strtoul(de->d_name, &end, 10);

		if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && !*end)
			ids[n++] = (uint32_t)v;
	}
	closedir(dir);
	qsort(ids, (size_t)n, sizeof(ids[0]), cmp_u32);
	for (int i = 0; i < n && G.ndev < FH_MAX_DEV; i++) {
		uint64_t gpu_id = 0;
		struct fh_props p;
		struct fh_dev *d = &G.dev[G.ndev];

		snprintf(path, sizeof(path), "%s/sys/class/kfd/kfd/topology/nodes/%u/gpu_id", G.root, ids[i]);
		if (read_u64_file(path, &gpu_id) || gpu_id == 0)
			continue;
		snprintf(path, sizeof(path), "%s/sys/class/kfd/kfd/topology/nodes/%u/properties", G.root,
			 ids[i]);
		if (read_props(path, &p))
			continue;
		if (!p.have_cwsr || !p.have_ctl) {
			const char *missing = p.have_cwsr ? "ctl_stack_size"
					      : p.have_ctl ? "cwsr_size"
							   : "cwsr_size or ctl_stack_size";

			/* always said (not only with FAKEHIP_DEBUG): nothing else would tell why */
			fh_log("fakehip: GPU node %u (gpu_id %llu) has no %s in its sysfs properties: fakehip "
			       "takes the CWSR sizes from sysfs only and needs a kernel or emulator that "
			       "publishes cwsr_size and ctl_stack_size (Linux 6.12+ or kfd-emu); read %s",
			       ids[i], (unsigned long long)gpu_id, missing, path);
			return -1;
		}
		memset(d, 0, sizeof(*d));
		d->node = ids[i];
		d->gpu_id = (uint32_t)gpu_id;
		d->render_minor = (uint32_t)p.drm_render_minor;
		d->render_fd = -1;
		d->num_xcc = (uint32_t)(p.num_xcc ? p.num_xcc : 1);
		d->cwsr_size = (uint32_t)p.cwsr_size;
		d->ctl_stack_size = (uint32_t)p.ctl_stack_size;
		d->debug_memory_size = debug_memory_size(&p);
		G.ndev++;
	}
	return 0;
}
