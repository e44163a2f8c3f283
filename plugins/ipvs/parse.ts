// Reading the kernel back: a full sync compares the desired picture with
// what `ipvsadm -Sn`, `ipset save` and `ip -j addr` report, so a restart or a
// failed sync converges without flushing anything that is already right.

import { parseIpAddrJson, splitHostPort } from "../../src/host/toolkit/index.ts";
import { type KernelModel, type Proto, type RealServer, type VirtualServer, emptyKernel, rsKey, vsKey } from "./model.ts";

const protoFlags: Record<string, Proto> = {
  "-t": "tcp",
  "--tcp-service": "tcp",
  "-u": "udp",
  "--udp-service": "udp",
  "--sctp-service": "sctp",
};

function serviceOf(tokens: string[]): Pick<VirtualServer, "proto" | "ip" | "port"> | undefined {
  for (let i = 0; i < tokens.length - 1; i++) {
    const proto = protoFlags[tokens[i]!];
    if (!proto) continue;
    const hp = splitHostPort(tokens[i + 1]!);
    return hp && { proto, ...hp };
  }
  return undefined; // fwmark services are not kpng's
}

const flagValue = (tokens: string[], ...flags: string[]) => {
  const i = tokens.findIndex((t) => flags.includes(t));
  return i >= 0 ? tokens[i + 1] : undefined;
};

/** Parses `ipvsadm -Sn` (the save format `ipvsadm -R` reads). */
export function parseIpvsSave(text: string): KernelModel["virtualServices"] {
  const out: KernelModel["virtualServices"] = new Map();
  for (const line of text.split("\n")) {
    const tokens = line.trim().split(/\s+/);
    const svc = serviceOf(tokens);
    if (!svc) continue;
    if (tokens[0] === "-A") {
      const timeout = flagValue(tokens, "-p", "--persistent");
      const vs: VirtualServer = { ...svc, scheduler: flagValue(tokens, "-s", "--scheduler") ?? "wlc" };
      if (timeout) vs.persistence = Number(timeout);
      out.set(vsKey(vs), { vs, reals: new Map() });
    } else if (tokens[0] === "-a") {
      const hp = splitHostPort(flagValue(tokens, "-r", "--real-server") ?? "");
      const v = out.get(vsKey(svc));
      if (!hp || !v) continue;
      const rs: RealServer = { ...hp, weight: Number(flagValue(tokens, "-w", "--weight") ?? 1) };
      v.reals.set(rsKey(rs), rs);
    }
  }
  return out;
}

/** Entries (`SET ENTRY`) of the named sets in `ipset save` output. */
export function parseIpsetSave(text: string, ours: ReadonlySet<string>): Set<string> {
  const out = new Set<string>();
  for (const line of text.split("\n")) {
    if (!line.startsWith("add ")) continue;
    const [, set, entry] = line.trim().split(/\s+/);
    if (set && entry && ours.has(set)) out.add(`${set} ${entry}`);
  }
  return out;
}

/**
 * Connection counts (active + inactive) per real server from
 * `ipvsadm -Ln --exact -t VIP:PORT`:
 *   `  -> 198.19.1.5:8080   Masq    0      3          0`
 */
export function parseIpvsConnections(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^\s*->\s+(\S+)\s+\S+\s+\d+\s+(\d+)\s+(\d+)/.exec(line);
    if (!m) continue;
    const hp = splitHostPort(m[1]!);
    if (hp) out.set(rsKey(hp), Number(m[2]) + Number(m[3]));
  }
  return out;
}

/** Builds a kernel picture from the three reads of a full sync. */
export function parseKernel(o: { ipvsSave: string; ipsetSave: string; dummyAddrs: string; ourSets: ReadonlySet<string> }): KernelModel {
  const k = emptyKernel();
  for (const [key, v] of parseIpvsSave(o.ipvsSave)) k.virtualServices.set(key, v);
  for (const e of parseIpsetSave(o.ipsetSave, o.ourSets)) k.entries.add(e);
  for (const a of parseIpAddrJson(o.dummyAddrs)) k.addresses.add(a);
  return k;
}
