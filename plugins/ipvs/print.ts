// Typed operations -> the stdin of one command each: `ipset restore`,
// `ipvsadm -R` and `ip -batch -`. Printing is the only place that knows the
// tools' syntax.

import { familyOf, hostPort, type Family } from "../../src/host/toolkit/index.ts";
import { dummyInterface, setIds, setMaxElem, setName, sets } from "./names.ts";
import type { AddressOp, IpvsOp, SetOp, VirtualServer } from "./model.ts";

/** `-t 198.18.0.1:80`, `-u [2001:db8:1::1]:53`, `--sctp-service ...` */
export function serviceFlag(vs: Pick<VirtualServer, "proto" | "ip" | "port">): string {
  const flag = vs.proto === "tcp" ? "-t" : vs.proto === "udp" ? "-u" : "--sctp-service";
  return `${flag} ${hostPort(vs.ip, vs.port)}`;
}

const serverArgs = (vs: VirtualServer) => `-s ${vs.scheduler}${vs.persistence ? ` -p ${vs.persistence}` : ""}`;

export function printIpvsadm(ops: readonly IpvsOp[]): string {
  let out = "";
  for (const o of ops) {
    const svc = serviceFlag(o.vs);
    switch (o.op) {
      case "add-service":
        out += `-A ${svc} ${serverArgs(o.vs)}\n`;
        break;
      case "edit-service":
        out += `-E ${svc} ${serverArgs(o.vs)}\n`;
        break;
      case "delete-service":
        out += `-D ${svc}\n`;
        break;
      case "add-real":
        out += `-a ${svc} -r ${hostPort(o.rs.ip, o.rs.port)} -m -w ${o.rs.weight}\n`;
        break;
      case "edit-real":
        out += `-e ${svc} -r ${hostPort(o.rs.ip, o.rs.port)} -m -w ${o.rs.weight}\n`;
        break;
      case "delete-real":
        out += `-d ${svc} -r ${hostPort(o.rs.ip, o.rs.port)}\n`;
        break;
    }
  }
  return out;
}

/** `create` lines for every set of the given families; -exist makes them idempotent. */
export function printSetCreates(families: Iterable<Family>): string {
  let out = "";
  for (const f of families) {
    for (const id of setIds) {
      out += `create ${setName(id, f)} ${sets[id].type} family ${f === "v4" ? "inet" : "inet6"} maxelem ${setMaxElem} -exist\n`;
    }
  }
  return out;
}

export function printIpset(ops: readonly SetOp[]): string {
  let out = "";
  for (const o of ops) out += `${o.op} ${o.set} ${o.entry} -exist\n`;
  return out;
}

/** `replace` is idempotent; a `del` of a missing address fails, which forces a full (re-reading) sync. */
export function printAddresses(ops: readonly AddressOp[]): string {
  let out = "";
  for (const o of ops) {
    const prefix = familyOf(o.ip) === "v4" ? 32 : 128;
    out += `address ${o.op === "add" ? "replace" : "del"} ${o.ip}/${prefix} dev ${dummyInterface}\n`;
  }
  return out;
}
