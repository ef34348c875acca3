/*
 * graph.c (layer 1): graphs of kernel nodes, the objects behind hipGraph_t
 * and stream capture: creation, appending a node, freeing. The HIP graph
 * calls are in hip_launch.c.
 */
#include "fakehip_internal.h"

hipError_t graph_append(struct fh_graph *g, const struct fh_knode *k, struct fh_knode **out)
{
	struct fh_knode *node;

	if (g->n == g->cap) {
		size_t nc = g->cap ? g->cap * 2 : 8;
		struct fh_knode **nn = realloc(g->nodes, nc * sizeof(*nn));

		if (!nn)
			return hipErrorOutOfMemory;
		g->nodes = nn;
		g->cap = nc;
	}
	node = malloc(sizeof(*node));
	if (!node)
		return hipErrorOutOfMemory;
	*node = *k;
	g->nodes[g->n++] = node;
	if (out)
		*out = node;
	return hipSuccess;
}

struct fh_graph *graph_new(void)
{
	struct fh_graph *g = calloc(1, sizeof(*g));

	if (g)
		g->magic = FH_GRAPH_MAGIC;
	return g;
}

void graph_free(struct fh_graph *g)
{
	for (size_t i = 0; i < g->n; i++)
		free(g->nodes[i]);
	free(g->nodes);
	g->magic = 0;
	free(g);
}
