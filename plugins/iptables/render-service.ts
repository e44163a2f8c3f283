// One service's rules for one address family: the chains it owns (SVC, SVX,
// EXT, FW, SEP) and its rules in the fixed chains (dispatch, node ports,
// filter REJECT/DROP, firewall). Pure: (service, endpoints, config) -> data.
//
// The shape follows upstream kube-proxy's iptables proxier
// (pkg/proxy/iptables/proxier.go); where kpng's node-local model already made
// a decision (endpoint scopes after traffic policy, topology and terminating
// fallback), the renderer just obeys it.
//
// One departure, for scale: when the host has ipset, an endpoint is DNATed
// straight from the balancing rule and hairpin masquerade is one ipset match
// in KPNG-POSTROUTING (names.ts, hairpinSets): no SEP chain per endpoint,
// except under ClientIP affinity (`-m recent --set` needs one). iptables-nft's
// restore cost and the kernel's validation of the whole nat table at every
// commit (nft_table_validate) grow with the chain count, and this removes
// most chains: both an endpoint change and the first restore cost less (see
// docs/results/2026-11.md; bench/iptables.bench.ts).

import {
  affinitySeconds,
  canonicalIP,
  cidrsOf,
  type Config,
  type Endpoint,
  externallyAccessible,
  type Family,
  hostPort,
  iptablesLocalMatches,
  ipsOf,
  localDetectFor,
  type PortMapping,
  protocolName,
  servedInFamily,
  type Service,
  targetPort,
} from "../../src/host/toolkit/index.ts";
import { chains, endpointChain, serviceChains, servicePortId, type Table } from "./names.ts";
import type { Rule } from "./render-restore.ts";
import { prefixContains } from "./render-fixed.ts";

export interface OwnedChain {
  table: Table;
  name: string;
  rules: Rule[];
  /** its rules printed (plan.ts chainLines), once */
  lines?: string[];
}

export interface ServiceRules {
  /** chains only this service uses, keyed `table/name` */
  chains: Map<string, OwnedChain>;
  /** its rules in the fixed chains */
  shared: Rule[];
  /** its members of the family's hairpin ipset (`ip,protocol-number:port,ip`) */
  hairpin: Set<string>;
}

/** An endpoint as the renderer needs it, for one family and one service port. */
export interface PortEndpoint {
  ip: string;
  port: number;
  internal: boolean;
  external: boolean;
  /** its SEP chain's name (when it has one) */
  readonly chain: string;
}

export interface RenderServiceInput {
  service: Service;
  endpoints: ReadonlyMap<string, Endpoint>;
  family: Family;
  config: Config;
  /**
   * Upstream's large-cluster mode (more than 1,000 endpoints on the node's
   * view): per-endpoint rules carry no comment, a smaller restore input.
   * kpng goes further there: no nat rule carries one (natComment).
   */
  largeCluster?: boolean;
  /** hairpin by the ipset (default); false: a SEP chain per endpoint, upstream's layout */
  hairpinSet?: boolean;
}

/** An endpoint whose SEP chain name (a sha256) is computed only if asked for: most endpoints have no SEP chain. */
function portEndpoint(portId: string, ip: string, port: number, internal: boolean, external: boolean): PortEndpoint {
  let chain: string | undefined;
  return {
    ip,
    port,
    internal,
    external,
    get chain() {
      return (chain ??= endpointChain(portId, ip, port));
    },
  };
}

/** The endpoints of one service port, de-duplicated by address and port, in a stable order. */
export function portEndpoints(portId: string, pm: PortMapping, endpoints: ReadonlyMap<string, Endpoint>, family: Family): PortEndpoint[] {
  const byAddress = new Map<string, PortEndpoint>();
  for (const ep of endpoints.values()) {
    const ip = ipsOf(ep.IPs, family)[0];
    if (!ip) continue;
    const port = targetPort(ep, pm);
    const key = `${ip} ${port}`;
    const prev = byAddress.get(key);
    byAddress.set(
      key,
      portEndpoint(portId, ip, port, !!ep.Scopes?.Internal || !!prev?.internal, !!ep.Scopes?.External || !!prev?.external),
    );
  }
  return [...byAddress.values()].sort((a, b) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : a.port - b.port));
}

export function renderService(input: RenderServiceInput): ServiceRules {
  const { service: svc } = input;
  const out: ServiceRules = { chains: new Map(), shared: [], hairpin: new Set() };
  const own = (table: Table, name: string): Rule[] => {
    const key = `${table}/${name}`;
    let c = out.chains.get(key);
    if (!c) out.chains.set(key, (c = { table, name, rules: [] }));
    return c.rules;
  };
  if (!servedInFamily(svc, input.family)) return out;
  for (const pm of svc.Ports) renderPort({ input, pm, out, own });
  if (svc.HealthCheckNodePort > 0) {
    out.shared.push({
      table: "filter",
      chain: chains.healthCheck,
      comment: `${svc.Namespace}/${svc.Name} health check node port`,
      match: ["-p", "tcp", "-m", "tcp", "--dport", String(svc.HealthCheckNodePort)],
      target: ["-j", "ACCEPT"],
    });
  }
  return out;
}

interface PortContext {
  input: RenderServiceInput;
  pm: PortMapping;
  out: ServiceRules;
  own: (table: Table, name: string) => Rule[];
}

/** Whether endpoints get SEP chains (see the header): affinity to record, or no ipset for hairpin. */
const ownChains = (hairpinSet: boolean, affinity: number | undefined) => !hairpinSet || affinity !== undefined;

/**
 * ipset resolves a protocol name through /etc/protocols (open, read, close)
 * for every member it parses, and a number without: most of `ipset restore`'s
 * time for a full hairpin set. The kernel stores the number either way, and
 * `ipset list` prints the name.
 */
const protocolNumbers = { tcp: 6, udp: 17, sctp: 132 } as const;

/**
 * The hairpin ipset member of an endpoint: a packet from it to itself
 * (names.ts, hairpinSets). One spelling per address, since members are
 * counted by text across services.
 */
export function hairpinMember(ep: { ip: string; port: number }, proto: keyof typeof protocolNumbers) {
  const ip = canonicalIP(ep.ip);
  return `${ip},${protocolNumbers[proto]}:${ep.port},${ip}`;
}

/**
 * A nat rule's comment; none in large-cluster mode. Upstream drops only the
 * per-endpoint ones; kpng drops them all in the nat table: iptables-nft
 * writes a comment as one more xt match per rule, and the kernel walks every
 * rule reachable from the nat table's base chains at each commit that adds a
 * jump or a DNAT (nft_table_validate), once per hook (PREROUTING, OUTPUT).
 * The filter table keeps its comments: a change of endpoints does not touch it.
 */
const natComment = (p: PortPlan, text: string) => (p.largeCluster ? undefined : text);

/** The per-endpoint rules' comment; none in large-cluster mode (as upstream). */
const endpointComment = (p: PortPlan, ep: PortEndpoint) => (p.largeCluster ? undefined : `${p.label} -> ${hostPort(ep.ip, ep.port)}`);

/** Load-balancing rules over `eps` into `chain`: affinity first, then kube-proxy's 1/(n-i) statistic cascade. */
function balance(p: PortPlan, out: ServiceRules, rules: Rule[], chain: string, eps: PortEndpoint[]) {
  if (p.affinity !== undefined) {
    for (const ep of eps) {
      rules.push({
        table: "nat",
        chain,
        comment: endpointComment(p, ep),
        match: ["-m", "recent", "--name", ep.chain, "--rcheck", "--seconds", String(p.affinity), "--reap"],
        target: ["-j", ep.chain],
      });
    }
  }
  eps.forEach((ep, i) => {
    const left = eps.length - i;
    const pick = left > 1 ? ["-m", "statistic", "--mode", "random", "--probability", probability(left)] : [];
    if (p.sepChains) {
      rules.push({ table: "nat", chain, comment: endpointComment(p, ep), match: pick, target: ["-j", ep.chain] });
    } else {
      rules.push({ table: "nat", chain, comment: endpointComment(p, ep), match: [...pick, "-p", p.proto], target: dnat(ep) });
      out.hairpin.add(hairpinMember(ep, p.proto));
    }
  });
}

/** 1/left as the statistic match's text, printed once per count (a full sync prints one per endpoint) */
const probabilities: string[] = [];
const probability = (left: number) => (probabilities[left] ??= (1 / left).toFixed(10));

const dnat = (ep: PortEndpoint) => ["-j", "DNAT", "--to-destination", hostPort(ep.ip, ep.port)];

/** Everything the rules of one service port are derived from, for one family. */
interface PortPlan {
  svc: Service;
  config: Config;
  family: Family;
  proto: "tcp" | "udp" | "sctp";
  nodePort: number;
  label: string;
  largeCluster: boolean;
  /** endpoints get SEP chains (ownChains) */
  sepChains: boolean;
  /** `-p proto -m proto --dport port` */
  dport: string[];
  clusterIPs: readonly string[];
  externalIPs: readonly string[];
  lbIPs: readonly string[];
  /** pod traffic matches (toolkit iptablesLocalMatches): any one of them */
  local: string[][];
  affinity: number | undefined;
  internal: PortEndpoint[];
  external: PortEndpoint[];
  /** endpoints that get a SEP chain: used by a balancing chain, when sepChains */
  used: PortEndpoint[];
  hasEndpoints: boolean;
  accessible: boolean;
  /** the EXT chain exists: upstream keeps it whenever the service has endpoints at all, for the eTP=Local short-circuits */
  usesExt: boolean;
  /** the SVC chain exists: a cluster IP, a short-circuit or EXT jumps to it */
  svcNeeded: boolean;
  /** LB IP -> allowed source CIDRs */
  ranges: Map<string, string[]>;
  /** balances over internal endpoints (SVC, or SVL under iTP=Local) */
  svcChain: string;
  /** balances over external endpoints; the internal chain itself when both sets are equal */
  svxChain: string;
  extChain: string;
  fwChain: string;
}

function planPort(input: RenderServiceInput, pm: PortMapping): PortPlan | undefined {
  const { service: svc, family, config } = input;
  const proto = protocolName(pm.Protocol);
  if (!proto || pm.Port <= 0) return undefined;
  const portId = servicePortId(svc.Namespace, svc.Name, proto, pm.Port);
  const externalIPs = ipsOf(svc.IPs?.ExternalIPs, family);
  const lbIPs = ipsOf(svc.IPs?.LoadBalancerIPs, family);
  const clusterIPs = ipsOf(svc.IPs?.ClusterIPs, family);
  const eps = portEndpoints(portId, pm, input.endpoints, family);
  const internal = eps.filter((e) => e.internal);
  const external = eps.filter((e) => e.external);
  // Chains named after the traffic policy whose endpoint set they balance,
  // as upstream's SVC (cluster) and SVL (local); one chain when both classes
  // use the same set, SVX when they differ under the same policy.
  const iLocal = svc.InternalTrafficToLocal;
  const eLocal = svc.ExternalTrafficToLocal;
  const chainOf = serviceChains(portId);
  const svcChain = chainOf(iLocal ? "local" : "cluster");
  const sameSets = internal.length === external.length && internal.every((e, i) => e.ip === external[i].ip && e.port === external[i].port);
  const svxChain = sameSets && internal.length ? svcChain : chainOf(eLocal === iLocal ? "external" : eLocal ? "local" : "cluster");
  const accessible = externallyAccessible(svc, pm, family);
  const usesExt = accessible && eps.length > 0;
  const svcNeeded = internal.length > 0 && (clusterIPs.length > 0 || (usesExt && (svc.ExternalTrafficToLocal || svxChain === svcChain)));
  const affinity = affinitySeconds(svc);
  const sepChains = ownChains(input.hairpinSet ?? true, affinity);
  return {
    svc,
    config,
    family,
    proto,
    nodePort: pm.NodePort,
    label: `${svc.Namespace}/${svc.Name}:${pm.Name || pm.Port}`,
    largeCluster: input.largeCluster ?? false,
    sepChains,
    dport: ["-p", proto, "-m", proto, "--dport", String(pm.Port)],
    clusterIPs,
    externalIPs,
    lbIPs,
    local: iptablesLocalMatches(localDetectFor(config, family)),
    affinity,
    internal,
    external,
    used: sepChains ? eps.filter((e) => (e.internal && svcNeeded) || (e.external && usesExt)) : [],
    hasEndpoints: eps.length > 0,
    accessible,
    usesExt,
    svcNeeded,
    ranges: sourceRanges(svc, lbIPs, family),
    svcChain,
    svxChain,
    extChain: chainOf("ext"),
    fwChain: chainOf("firewall"),
  };
}

/**
 * Upstream's verdicts: no endpoint at all -> REJECT (fail fast); endpoints
 * exist but none for this class under a Local policy -> DROP.
 */
function noEndpointVerdict(p: PortPlan, policyLocal: boolean) {
  const verdict = policyLocal && p.hasEndpoints ? "DROP" : "REJECT";
  return { verdict, why: verdict === "DROP" ? "has no local endpoints" : "has no endpoints" };
}

function renderPort({ input, pm, out, own }: PortContext) {
  const p = planPort(input, pm);
  if (!p) return;
  endpointRules(p, own);
  clusterIPRules(p, out, own);
  externalRules(p, out, own);
  firewallRules(p, out, own);
}

/** One SEP chain per endpoint that owns one: hairpin masquerade, affinity bookkeeping, DNAT. */
function endpointRules(p: PortPlan, own: PortContext["own"]) {
  const comment = natComment(p, p.label);
  for (const ep of p.used) {
    const rules = own("nat", ep.chain);
    rules.push({ table: "nat", chain: ep.chain, comment, match: ["-s", ep.ip], target: ["-j", chains.markMasq] });
    rules.push({
      table: "nat",
      chain: ep.chain,
      comment,
      match: ["-p", p.proto, ...(p.affinity !== undefined ? ["-m", "recent", "--name", ep.chain, "--set"] : []), "-m", p.proto],
      target: dnat(ep),
    });
  }
}

/**
 * The masquerade rule for traffic to a cluster IP (`to`: the destination
 * match, or none), or none when nothing is masqueraded (no cluster CIDR, no
 * masquerade-all). Traffic from outside the pod network gets masqueraded, or
 * the reply would bypass the node's un-DNAT.
 */
function clusterIPMasquerade(p: PortPlan, to: string[]): Pick<Rule, "match" | "target"> | undefined {
  if (p.config.masqueradeAll) return { match: to, target: ["-j", chains.markMasq] };
  if (p.local.length === 1) return { match: ["!", ...p.local[0], ...to], target: ["-j", chains.markMasq] };
  if (p.local.length > 1) return { match: to, target: ["-j", chains.markNonPod] };
  return undefined;
}

/**
 * Whether everything entering the balancing chain unmarked came through the
 * cluster-IP dispatch, which matched the cluster IP and port already: then
 * its masquerade rule need not match them again (upstream's does). The EXT
 * chain marks all traffic before it jumps here under eTP=Cluster, and sends
 * only pod and node-local traffic here under eTP=Local, except when the
 * external endpoints are this very chain's (outside clients, unmarked), and
 * except pod traffic under masquerade-all (which the destination match
 * kept unmarked). iptables-nft turns the destination, protocol and port
 * into six more expressions per rule, each looked up by name in the kernel
 * and walked at every commit (see docs/backends/iptables.md).
 */
const enteredByDispatch = (p: PortPlan) =>
  !(p.usesExt && p.svc.ExternalTrafficToLocal && (p.config.masqueradeAll || (p.external.length > 0 && p.svxChain === p.svcChain)));

function clusterIPRules(p: PortPlan, out: ServiceRules, own: PortContext["own"]) {
  const comment = natComment(p, `${p.label} cluster IP`);
  if (p.svcNeeded) {
    const rules = own("nat", p.svcChain);
    const masq = (to: string[]) => {
      const m = clusterIPMasquerade(p, to);
      if (m) rules.push({ table: "nat", chain: p.svcChain, comment, ...m });
    };
    if (p.clusterIPs.length && enteredByDispatch(p)) masq([]);
    for (const ip of p.clusterIPs) {
      const to = ["-d", ip, ...p.dport];
      if (!enteredByDispatch(p)) masq(to);
      out.shared.push({ table: "nat", chain: chains.services, comment, match: to, target: ["-j", p.svcChain] });
    }
    balance(p, out, rules, p.svcChain, p.internal);
  }
  if (!p.internal.length) {
    const { verdict, why } = noEndpointVerdict(p, p.svc.InternalTrafficToLocal);
    for (const ip of p.clusterIPs)
      out.shared.push({
        table: "filter",
        chain: chains.filterServices,
        comment: `${p.label} ${why}`,
        match: ["-d", ip, ...p.dport],
        target: ["-j", verdict],
      });
  }
}

/** Node port, external IPs, LB IPs: the EXT chain and the dispatch to it, or REJECT/DROP in filter. */
function externalRules(p: PortPlan, out: ServiceRules, own: PortContext["own"]) {
  const nodePortMatch = ["-p", p.proto, "-m", p.proto, "--dport", String(p.nodePort)];
  if (p.usesExt) {
    if (p.external.length && p.svxChain !== p.svcChain) balance(p, out, own("nat", p.svxChain), p.svxChain, p.external);
    const rules = own("nat", p.extChain);
    const ext = (r: Omit<Rule, "table" | "chain"> & { comment: string }) =>
      rules.push({ table: "nat", chain: p.extChain, ...r, comment: natComment(p, r.comment) });
    const local = ["-m", "addrtype", "--src-type", "LOCAL"];
    if (p.svc.ExternalTrafficToLocal) {
      // Upstream's short-circuit: pods reaching an external destination are
      // treated as if they went out and came back through a load balancer:
      // no traffic policy, no masquerade. Traffic from the node itself is
      // masqueraded and balanced cluster-wide, else replies could not return.
      if (p.internal.length)
        for (const match of p.local)
          ext({ comment: `pod traffic for ${p.label} external destinations`, match, target: ["-j", p.svcChain] });
      ext({ comment: `masquerade LOCAL traffic for ${p.label} external destinations`, match: local, target: ["-j", chains.markMasq] });
      if (p.internal.length)
        ext({ comment: `route LOCAL traffic for ${p.label} external destinations`, match: local, target: ["-j", p.svcChain] });
    } else {
      ext({ comment: `masquerade traffic for ${p.label} external destinations`, match: [], target: ["-j", chains.markMasq] });
    }
    // Without external endpoints nothing is DNATed here, and the filter rule below drops/rejects it.
    if (p.external.length) ext({ comment: `${p.label} external endpoints`, match: [], target: ["-j", p.svxChain] });

    const dispatch = (ip: string, kind: string, target: string) =>
      out.shared.push({
        table: "nat",
        chain: chains.services,
        comment: natComment(p, `${p.label} ${kind}`),
        match: ["-d", ip, ...p.dport],
        target: ["-j", target],
      });
    for (const ip of p.externalIPs) dispatch(ip, "external IP", p.extChain);
    for (const ip of p.lbIPs) dispatch(ip, "loadbalancer IP", p.ranges.has(ip) ? p.fwChain : p.extChain);
    if (p.nodePort > 0)
      out.shared.push({
        table: "nat",
        chain: chains.nodePorts,
        comment: natComment(p, `${p.label} node port`),
        match: nodePortMatch,
        target: ["-j", p.extChain],
      });
  }
  if (!p.external.length && p.accessible) {
    const { verdict, why } = noEndpointVerdict(p, p.svc.ExternalTrafficToLocal);
    for (const ip of [...p.externalIPs, ...p.lbIPs])
      out.shared.push({
        table: "filter",
        chain: chains.externalServices,
        comment: `${p.label} ${why}`,
        match: ["-d", ip, ...p.dport],
        target: ["-j", verdict],
      });
    if (p.nodePort > 0)
      out.shared.push({
        table: "filter",
        chain: chains.filterNodePorts,
        comment: `${p.label} ${why}`,
        match: nodePortMatch,
        target: ["-j", verdict],
      });
  }
}

/** loadBalancerSourceRanges: the FW chain lets allowed sources on to EXT; filter drops what it did not DNAT. */
function firewallRules(p: PortPlan, out: ServiceRules, own: PortContext["own"]) {
  if (p.usesExt && p.ranges.size) {
    const fw = own("nat", p.fwChain);
    const comment = natComment(p, `${p.label} loadbalancer IP`);
    for (const [ip, cidrs] of p.ranges) {
      for (const cidr of cidrs)
        fw.push({ table: "nat", chain: p.fwChain, comment, match: ["-d", ip, "-s", cidr], target: ["-j", p.extChain] });
      // A VIP-like LB IP is often local too: the node's own requests then
      // come from the LB IP itself and must pass (upstream does the same).
      if (cidrs.some((c) => p.config.nodeIPs.some((n) => prefixContains(c, n))))
        fw.push({ table: "nat", chain: p.fwChain, comment, match: ["-d", ip, "-s", ip], target: ["-j", p.extChain] });
    }
  }
  // After DNAT the destination is no longer the LB IP: only what the FW chain refused still matches here.
  for (const ip of p.ranges.keys()) {
    out.shared.push({
      table: "filter",
      chain: chains.firewall,
      comment: `${p.label} traffic not accepted by ${p.fwChain}`,
      match: ["-d", ip, ...p.dport],
      target: ["-j", "DROP"],
    });
  }
}

/** LB IP -> allowed source CIDRs of its family, for LB IPs that have an IPFilter with source ranges. */
function sourceRanges(svc: Service, lbIPs: readonly string[], family: Family): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const f of svc.IPFilters) {
    const targets = new Set(ipsOf(f.TargetIPs, family));
    // Ranges of the other family only: no filter for this one (upstream filters ranges per family).
    const cidrs = cidrsOf(f.SourceRanges, family);
    if (!cidrs.length) continue;
    for (const ip of lbIPs) if (targets.has(ip)) out.set(ip, [...(out.get(ip) ?? []), ...cidrs]);
  }
  return out;
}
