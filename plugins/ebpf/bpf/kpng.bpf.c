// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only)
// kpng's socket-level service load balancer, attached at the cgroup v2
// sock_addr hooks. A connect()/sendmsg() to a service frontend (cluster IP,
// node IP + node port, external or load-balancer IP) is rewritten to one of
// the frontend's endpoints before any packet exists: no DNAT, no conntrack
// entry. recvmsg()/getpeername() turn the endpoint back into the frontend,
// so a UDP client sees replies from the address it sent to.
//
// Maps (layouts mirrored in ../maps.ts; change both together):
//   kpng_front    (addr, port, proto, family) -> group id
//   kpng_group    group id -> endpoint count, ClientIP affinity seconds, flags
//   kpng_backend  (group id, slot) -> endpoint (addr, port)
//   kpng_affinity LRU (client netns cookie, group id) -> chosen slot + when
//   kpng_flow     LRU (socket cookie, group id) -> an unconnected UDP socket's endpoint
//   kpng_revnat   LRU (socket cookie, endpoint) -> frontend, for the reverse hooks
// The loader pins every map and one bpf_link per hook under bpffs, so the
// programs keep working while no kpng process runs.

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ECONNREFUSED 111

// A group whose frontends are refused with EPERM rather than ECONNREFUSED:
// kube-proxy drops (no ICMP) where a Local policy leaves no endpoint.
#define GROUP_DROP 1

struct front_key {
	__u32 addr[4]; // IPv4: addr[0], rest 0
	__u16 port;    // network byte order
	__u8 proto;    // IPPROTO_TCP / UDP / SCTP
	__u8 family;   // 4 or 6
};

struct group {
	__u32 count;
	__u32 affinity_sec; // 0: no ClientIP affinity
	__u32 flags;
};

struct backend_key {
	__u32 group;
	__u32 slot;
};

struct backend {
	__u32 addr[4];
	__u16 port; // network byte order
	__u8 family; // 4 or 6: lets a new kpng read back what an old one wrote
	__u8 pad;
};

struct aff_key {
	__u64 netns;
	__u32 group;
	__u32 pad;
};

struct aff_val {
	__u64 ts;
	__u32 slot;
	__u32 pad;
	struct backend be;
};

struct rev_key {
	__u64 cookie;
	__u32 addr[4];
	__u16 port;
	__u16 pad;
	__u32 pad2;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct front_key);
	__type(value, __u32);
} kpng_front SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct group);
} kpng_group SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct backend_key);
	__type(value, struct backend);
} kpng_backend SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct aff_key);
	__type(value, struct aff_val);
} kpng_affinity SEC(".maps");

// (socket cookie, group id) -> the endpoint an unconnected socket's datagrams go to
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct aff_key);
	__type(value, struct aff_val);
} kpng_flow SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rev_key);
	__type(value, struct backend);
} kpng_revnat SEC(".maps");

enum verdict { PASS, TRANSLATE, REFUSE, DROP };

static __always_inline int same_backend(const struct backend *a, const struct backend *b)
{
	return a->addr[0] == b->addr[0] && a->addr[1] == b->addr[1] && a->addr[2] == b->addr[2] &&
	       a->addr[3] == b->addr[3] && a->port == b->port;
}

// Whether a remembered choice still holds: its endpoint still in its slot.
static __always_inline int still(const struct aff_val *a, const struct group *g, __u32 id, struct backend *out)
{
	struct backend_key bk = { .group = id, .slot = a->slot };
	struct backend *be = bpf_map_lookup_elem(&kpng_backend, &bk);
	if (!be || a->slot >= g->count || !same_backend(be, &a->be))
		return 0;
	*out = *be;
	return 1;
}

// Picks the endpoint for frontend `fk`: for a datagram of an unconnected
// socket (`per_socket`), the one its earlier datagrams went to, as a
// conntrack flow keeps it; else the affinity entry's while it lives; else a
// random one.
static __always_inline enum verdict pick(struct bpf_sock_addr *ctx, struct front_key *fk, struct backend *out, int per_socket)
{
	if (fk->proto != IPPROTO_TCP && fk->proto != IPPROTO_UDP && fk->proto != IPPROTO_SCTP)
		return PASS;
	__u32 *gid = bpf_map_lookup_elem(&kpng_front, fk);
	if (!gid)
		return PASS;
	__u32 id = *gid;
	struct group *g = bpf_map_lookup_elem(&kpng_group, &id);
	if (!g || g->count == 0)
		return g && (g->flags & GROUP_DROP) ? DROP : REFUSE;

	struct aff_key fl = {};
	if (per_socket) {
		fl.netns = bpf_get_socket_cookie(ctx);
		fl.group = id;
		struct aff_val *f = bpf_map_lookup_elem(&kpng_flow, &fl);
		if (f && still(f, g, id, out))
			return TRANSLATE;
	}
	struct aff_key ak = {};
	__u64 now = 0;
	if (g->affinity_sec) {
		// The client's network namespace stands for its IP (a pod has its
		// own): the source address is not chosen yet at connect().
		ak.netns = bpf_get_netns_cookie(ctx);
		ak.group = id;
		now = bpf_ktime_get_ns();
		struct aff_val *a = bpf_map_lookup_elem(&kpng_affinity, &ak);
		if (a && now - a->ts <= (__u64)g->affinity_sec * 1000000000ULL && still(a, g, id, out)) {
			a->ts = now;
			return TRANSLATE;
		}
	}
	struct backend_key bk = { .group = id, .slot = bpf_get_prandom_u32() % g->count };
	struct backend *be = bpf_map_lookup_elem(&kpng_backend, &bk);
	if (!be)
		return REFUSE; // a group being rewritten: count and slots disagree for a moment
	*out = *be;
	struct aff_val v = { .ts = now, .slot = bk.slot, .be = *be };
	if (g->affinity_sec)
		bpf_map_update_elem(&kpng_affinity, &ak, &v, BPF_ANY);
	if (per_socket)
		bpf_map_update_elem(&kpng_flow, &fl, &v, BPF_ANY);
	return TRANSLATE;
}

static __always_inline void remember(struct bpf_sock_addr *ctx, const struct backend *be, const struct front_key *fk)
{
	struct rev_key rk = { .cookie = bpf_get_socket_cookie(ctx), .port = be->port };
	rk.addr[0] = be->addr[0];
	rk.addr[1] = be->addr[1];
	rk.addr[2] = be->addr[2];
	rk.addr[3] = be->addr[3];
	struct backend svc = { .port = fk->port };
	svc.addr[0] = fk->addr[0];
	svc.addr[1] = fk->addr[1];
	svc.addr[2] = fk->addr[2];
	svc.addr[3] = fk->addr[3];
	bpf_map_update_elem(&kpng_revnat, &rk, &svc, BPF_ANY);
}

static __always_inline int refuse(enum verdict v)
{
	if (v == REFUSE)
		bpf_set_retval(-ECONNREFUSED);
	return 0; // DROP: the hook's own EPERM
}

static __always_inline int forward4(struct bpf_sock_addr *ctx, int per_socket)
{
	struct front_key fk = { .port = (__u16)ctx->user_port, .proto = ctx->protocol, .family = 4 };
	fk.addr[0] = ctx->user_ip4;
	struct backend be = {};
	enum verdict v = pick(ctx, &fk, &be, per_socket);
	if (v == PASS)
		return 1;
	if (v != TRANSLATE)
		return refuse(v);
	ctx->user_ip4 = be.addr[0];
	ctx->user_port = be.port;
	remember(ctx, &be, &fk);
	return 1;
}

static __always_inline int forward6(struct bpf_sock_addr *ctx, int per_socket)
{
	struct front_key fk = { .port = (__u16)ctx->user_port, .proto = ctx->protocol, .family = 6 };
	fk.addr[0] = ctx->user_ip6[0];
	fk.addr[1] = ctx->user_ip6[1];
	fk.addr[2] = ctx->user_ip6[2];
	fk.addr[3] = ctx->user_ip6[3];
	struct front_key asked = fk;
	// An IPv6 socket reaching an IPv4 service through ::ffff:a.b.c.d (a
	// dual-stack socket) is balanced as IPv4, the endpoint mapped back.
	int mapped = fk.addr[0] == 0 && fk.addr[1] == 0 && fk.addr[2] == bpf_htonl(0xffff);
	if (mapped) {
		fk.family = 4;
		fk.addr[0] = fk.addr[3];
		fk.addr[2] = 0;
		fk.addr[3] = 0;
	}
	struct backend be = {};
	enum verdict v = pick(ctx, &fk, &be, per_socket);
	if (v == PASS)
		return 1;
	if (v != TRANSLATE)
		return refuse(v);
	if (mapped) {
		be.addr[3] = be.addr[0];
		be.addr[2] = bpf_htonl(0xffff);
		be.addr[0] = 0;
		be.addr[1] = 0;
	}
	ctx->user_ip6[0] = be.addr[0];
	ctx->user_ip6[1] = be.addr[1];
	ctx->user_ip6[2] = be.addr[2];
	ctx->user_ip6[3] = be.addr[3];
	ctx->user_port = be.port;
	remember(ctx, &be, &asked);
	return 1;
}

static __always_inline int reverse4(struct bpf_sock_addr *ctx)
{
	struct rev_key rk = { .cookie = bpf_get_socket_cookie(ctx), .port = (__u16)ctx->user_port };
	rk.addr[0] = ctx->user_ip4;
	struct backend *svc = bpf_map_lookup_elem(&kpng_revnat, &rk);
	if (svc) {
		ctx->user_ip4 = svc->addr[0];
		ctx->user_port = svc->port;
	}
	return 1;
}

static __always_inline int reverse6(struct bpf_sock_addr *ctx)
{
	struct rev_key rk = { .cookie = bpf_get_socket_cookie(ctx), .port = (__u16)ctx->user_port };
	rk.addr[0] = ctx->user_ip6[0];
	rk.addr[1] = ctx->user_ip6[1];
	rk.addr[2] = ctx->user_ip6[2];
	rk.addr[3] = ctx->user_ip6[3];
	struct backend *svc = bpf_map_lookup_elem(&kpng_revnat, &rk);
	if (svc) {
		ctx->user_ip6[0] = svc->addr[0];
		ctx->user_ip6[1] = svc->addr[1];
		ctx->user_ip6[2] = svc->addr[2];
		ctx->user_ip6[3] = svc->addr[3];
		ctx->user_port = svc->port;
	}
	return 1;
}

SEC("cgroup/connect4")
int kpng_connect4(struct bpf_sock_addr *ctx) { return forward4(ctx, 0); }

SEC("cgroup/connect6")
int kpng_connect6(struct bpf_sock_addr *ctx) { return forward6(ctx, 0); }

SEC("cgroup/sendmsg4")
int kpng_sendmsg4(struct bpf_sock_addr *ctx) { return forward4(ctx, 1); }

SEC("cgroup/sendmsg6")
int kpng_sendmsg6(struct bpf_sock_addr *ctx) { return forward6(ctx, 1); }

SEC("cgroup/recvmsg4")
int kpng_recvmsg4(struct bpf_sock_addr *ctx) { return reverse4(ctx); }

SEC("cgroup/recvmsg6")
int kpng_recvmsg6(struct bpf_sock_addr *ctx) { return reverse6(ctx); }

SEC("cgroup/getpeername4")
int kpng_getpeername4(struct bpf_sock_addr *ctx) { return reverse4(ctx); }

SEC("cgroup/getpeername6")
int kpng_getpeername6(struct bpf_sock_addr *ctx) { return reverse6(ctx); }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
