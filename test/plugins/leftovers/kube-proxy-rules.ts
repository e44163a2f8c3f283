// Rulesets of kube-proxy 1.36's shapes, written by hand from its documented
// names (pkg/proxy/iptables, nftables and ipvs proxier.go): what a node holds
// after kube-proxy served one Service `default/web` (a ClusterIP, port 80 ->
// two endpoints on 8080, and node port 30080) in each mode. The addresses are
// parameters so the same text loads into a test's namespaces and feeds the
// planner's unit tests. Beside kube-proxy's, each carries rules of other
// software that must survive: kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY and
// KUBE-IPTABLES-HINT, a CNI's chain, a firewall's nft table, kube-router's ipset.

export interface Svc {
  clusterIP: string;
  endpoints: readonly string[];
  /** --cluster-cidr */
  podCIDR: string;
  nodePort: number;
}

/** kubelet's and other software's chains, in every table kube-proxy uses too (iptables-save text, built-in chains declared). */
export const foreignIptables = (family: "v4" | "v6" = "v4") => {
  const lo = family === "v4" ? "127.0.0.0/8" : "::1/128";
  return `*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:CNI-FORWARD - [0:0]
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s ${lo} -d ${lo} -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A CNI-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
COMMIT
`;
};

/** iptables mode (iptables-save of kube-proxy's own chains; load with `iptables-restore --noflush` after foreignIptables). */
export const iptablesMode = (s: Svc) => {
  const [a, b] = s.endpoints;
  const svc = "KUBE-SVC-WEBHTTP7Q4MVSDT6";
  const sepA = "KUBE-SEP-PODAAAAAAAAAAAA";
  const sepB = "KUBE-SEP-PODBBBBBBBBBBBB";
  const ext = "KUBE-EXT-WEBHTTP7Q4MVSDT6";
  return `*mangle
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*filter
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
*nat
:KUBE-EXT-WEBHTTP7Q4MVSDT6 - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:${sepA} - [0:0]
:${sepB} - [0:0]
:KUBE-SERVICES - [0:0]
:${svc} - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A ${ext} -m comment --comment "masquerade traffic for default/web:http external destinations" -j KUBE-MARK-MASQ
-A ${ext} -j ${svc}
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODEPORTS -p tcp -m comment --comment "default/web:http" -m tcp --dport ${s.nodePort} -j ${ext}
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A ${sepA} -s ${a}/32 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A ${sepA} -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination ${a}:8080
-A ${sepB} -s ${b}/32 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A ${sepB} -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination ${b}:8080
-A KUBE-SERVICES -d ${s.clusterIP}/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j ${svc}
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A ${svc} ! -s ${s.podCIDR} -d ${s.clusterIP}/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ
-A ${svc} -m comment --comment "default/web:http -> ${a}:8080" -m statistic --mode random --probability 0.50000000000 -j ${sepA}
-A ${svc} -m comment --comment "default/web:http -> ${b}:8080" -j ${sepB}
COMMIT
`;
};

/** nftables mode: `table ip kube-proxy` (load with `nft -f`); the base chains hook where kube-proxy's do. `nodeIP`: node port on it. */
export const nftablesMode = (s: Svc & { nodeIP?: string }) => {
  const [a, b] = s.endpoints;
  const svc = "service-ULMVA6XW-default/web/tcp/http";
  const ext = "external-ULMVA6XW-default/web/tcp/http";
  const ep = (ip: string) => `endpoint-${ip === a ? "5OJB2KTY" : "XZ5TBJAN"}-default/web/tcp/http__${ip}/8080`;
  return `table ip kube-proxy {
  comment "rules for kube-proxy"
  set cluster-ips { type ipv4_addr; comment "Active ClusterIPs"; elements = { ${s.clusterIP} } }
  set nodeport-ips { type ipv4_addr; comment "IPs that accept NodePort traffic"; }
  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"; }
  map service-nodeports { type inet_proto . inet_service : verdict; comment "NodePort traffic"; }
  map no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict; comment "vmap to drop or reject packets to services with no endpoints"; }
  map no-endpoint-nodeports { type inet_proto . inet_service : verdict; comment "vmap to drop or reject packets to service nodeports with no endpoints"; }
  map firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict; comment "destinations that are subject to LoadBalancerSourceRanges"; }
  chain filter-prerouting-pre-dnat { type filter hook prerouting priority -110; policy accept; ct state new jump firewall-check; }
  chain filter-output-pre-dnat { type filter hook output priority -110; policy accept; ct state new jump firewall-check; }
  chain filter-input { type filter hook input priority 0; policy accept; ct state new jump nodeport-endpoints-check; ct state new jump service-endpoints-check; }
  chain filter-forward { type filter hook forward priority 0; policy accept; ct state new jump service-endpoints-check; ct state new jump cluster-ips-check; }
  chain filter-output { type filter hook output priority 0; policy accept; ct state new jump service-endpoints-check; ct state new jump cluster-ips-check; }
  chain nat-prerouting { type nat hook prerouting priority -100; policy accept; jump services; }
  chain nat-output { type nat hook output priority -100; policy accept; jump services; }
  chain nat-postrouting { type nat hook postrouting priority 100; policy accept; jump masquerading; }
  chain mark-for-masquerade { mark set mark or 0x4000; }
  chain masquerading { meta mark & 0x4000 == 0 return; meta mark set meta mark ^ 0x4000; masquerade fully-random; }
  chain firewall-check { ip daddr . meta l4proto . th dport vmap @firewall-ips; }
  chain service-endpoints-check { ip daddr . meta l4proto . th dport vmap @no-endpoint-services; }
  chain nodeport-endpoints-check { ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports; }
  chain cluster-ips-check { ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"; }
  chain ${ep(a)} { ip saddr ${a} jump mark-for-masquerade; meta l4proto tcp dnat to ${a}:8080; }
  chain ${ep(b)} { ip saddr ${b} jump mark-for-masquerade; meta l4proto tcp dnat to ${b}:8080; }
  chain ${svc} { ip daddr ${s.clusterIP} tcp dport 80 ip saddr != ${s.podCIDR} jump mark-for-masquerade; numgen random mod 2 vmap { 0 : goto ${ep(a)}, 1 : goto ${ep(b)} }; }
  chain ${ext} { jump mark-for-masquerade; goto ${svc}; }
  chain services { ip daddr . meta l4proto . th dport vmap @service-ips; ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports; }
}
add element ip kube-proxy service-ips { ${s.clusterIP} . tcp . 80 : goto ${svc} }
${s.nodeIP ? `add element ip kube-proxy nodeport-ips { ${s.nodeIP} }\nadd element ip kube-proxy service-nodeports { tcp . ${s.nodePort} : goto ${ext} }\n` : ""}table ip6 kube-proxy {
  comment "rules for kube-proxy"
  set cluster-ips { type ipv6_addr; comment "Active ClusterIPs"; }
  chain nat-prerouting { type nat hook prerouting priority -100; policy accept; }
}
`;
};

/** Another program's nftables table, with its own hooks: kept by every sweep. */
export const foreignNft = `table inet firewalld-like {
  chain input { type filter hook input priority 10; policy accept; tcp dport 2222 drop; }
}
`;

/** IPVS mode's iptables rules (iptables-save; load after foreignIptables). */
export const ipvsModeIptables = (s: Svc) => `*filter
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-PROXY-FIREWALL -m comment --comment "Kubernetes service load balancer ip + port for load balancer with sourceRange" -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES ! -s ${s.podCIDR} -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
COMMIT
`;

/** IPVS mode's ipsets (`ipset restore` input), with a set of kube-router's beside them. */
export const ipvsModeIpsets = (s: Svc) => `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
create KUBE-EXTERNAL-IP hash:ip,port family inet hashsize 1024 maxelem 65536
create KUBE-LOAD-BALANCER hash:ip,port family inet hashsize 1024 maxelem 65536
create KUBE-LOAD-BALANCER-FW hash:ip,port family inet hashsize 1024 maxelem 65536
create KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
create KUBE-HEALTH-CHECK-NODE-PORT bitmap:port range 0-65535
create KUBE-IPVS-IPS hash:ip family inet hashsize 1024 maxelem 65536
create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536
create KUBE-SRC-RN7WVLPO hash:ip family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP ${s.clusterIP},tcp:80
add KUBE-IPVS-IPS ${s.clusterIP}
add KUBE-NODE-PORT-TCP ${s.nodePort}
${s.endpoints.map((e) => `add KUBE-LOOP-BACK ${e},tcp:8080,${e}`).join("\n")}
add KUBE-SRC-RN7WVLPO 198.19.0.99
`;

/** `ipvsadm -Sn` of that service: its cluster IP (on kube-ipvs0), its node port on a node IP, and another program's virtual server. */
export const ipvsModeVirtualServers = (s: Svc & { nodeIP: string; other: string }) => `-A -t ${s.clusterIP}:80 -s rr
${s.endpoints.map((e) => `-a -t ${s.clusterIP}:80 -r ${e}:8080 -m -w 1`).join("\n")}
-A -t ${s.nodeIP}:${s.nodePort} -s rr
${s.endpoints.map((e) => `-a -t ${s.nodeIP}:${s.nodePort} -r ${e}:8080 -m -w 1`).join("\n")}
-A -t ${s.other}:443 -s wlc
-a -t ${s.other}:443 -r ${s.other}:8443 -g -w 1
`;

/** iptables mode, IPv6 (ip6tables-save): the same chains for a cluster IP of that family. */
export const iptablesModeV6 = (clusterIP: string, endpoint: string) => `*mangle
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*filter
:KUBE-SERVICES - [0:0]
:KUBE-PROXY-CANARY - [0:0]
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-V6WEBHTTPQ4MVSDT6 - [0:0]
:KUBE-SEP-V6PODAAAAAAAAAAA - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d ${clusterIP}/128 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-V6WEBHTTPQ4MVSDT6
-A KUBE-SVC-V6WEBHTTPQ4MVSDT6 -j KUBE-SEP-V6PODAAAAAAAAAAA
-A KUBE-SEP-V6PODAAAAAAAAAAA -p tcp -m tcp -j DNAT --to-destination [${endpoint}]:8080
COMMIT
`;

/** kpng's iptables backend as it left a node whose iptables is the legacy flavour (its chains, a jump, a hairpin set's match) */
export const kpngIptablesLeft = `*nat
:KPNG-SERVICES - [0:0]
:KPNG-POSTROUTING - [0:0]
:KPNG-CANARY - [0:0]
-A PREROUTING -m comment --comment "kpng service portals" -j KPNG-SERVICES
-A POSTROUTING -m comment --comment "kpng postrouting rules" -j KPNG-POSTROUTING
COMMIT
`;
