// Bind mode: the service addresses (cluster, external, LB IPs) live on
// kpng's device so that the relays can listen on them and the node delivers
// their packets locally. A pure planner (what to add and delete) and a thin
// keeper running `ip`.
//
// Addresses get `scope host`: the node still accepts them from any
// interface, but never picks them as the source of its own connections (the
// relay's connections to endpoints leave with the node's address, not a
// cluster IP).

import type { Executor } from "../../src/plugins/backend.ts";
import type { Logger } from "../../src/core/log.ts";
import { errorMessage } from "../../src/core/errors.ts";
import { DEVICE, DEVICE_PEER } from "./names.ts";

/** `ip -batch` lines moving the device from `have` to `want` (pure) */
export function addressBatch(have: ReadonlySet<string>, want: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const ip of have) if (!want.has(ip)) out.push(`address del ${prefix(ip)} dev ${DEVICE}`);
  for (const ip of want) if (!have.has(ip)) out.push(`address add ${prefix(ip)} dev ${DEVICE} scope host${ip.includes(":") ? " nodad" : ""}`);
  return out;
}

const prefix = (ip: string) => (ip.includes(":") ? `${ip}/128` : `${ip}/32`);

/** addresses of `ip -j address show dev DEVICE` (link-local ones are the kernel's) */
export function parseAddresses(json: string): Set<string> {
  const out = new Set<string>();
  const links = JSON.parse(json || "[]") as { addr_info?: { local?: string; scope?: string }[] }[];
  for (const l of links) for (const a of l.addr_info ?? []) if (a.local && a.scope !== "link") out.add(a.local);
  return out;
}

export class AddressKeeper {
  /** what the device holds, as last read or written; undefined = read it first */
  private have: Set<string> | undefined;

  constructor(
    private readonly exec: Executor,
    private readonly log: Logger,
  ) {}

  /** creates the device when missing */
  async setup(): Promise<void> {
    const exists = await this.exec.run(["ip", "link", "show", DEVICE]).then(
      () => true,
      () => false,
    );
    if (!exists) {
      try {
        await this.exec.run(["ip", "link", "add", DEVICE, "type", "dummy"]);
      } catch (err) {
        if (!/Unknown device type|not supported/i.test(errorMessage(err))) throw err;
        this.log.info("no dummy driver in this kernel: service addresses go on a veth pair kept on the node", { device: DEVICE, peer: DEVICE_PEER });
        await this.exec.run(["ip", "link", "add", DEVICE, "type", "veth", "peer", "name", DEVICE_PEER]);
        await this.exec.run(["ip", "link", "set", DEVICE_PEER, "arp", "off", "up"]);
      }
    }
    await this.exec.run(["ip", "link", "set", DEVICE, "arp", "off", "up"]);
    this.have = undefined;
  }

  /** makes the device hold exactly `want` */
  async sync(want: ReadonlySet<string>): Promise<void> {
    this.have ??= parseAddresses(await this.exec.run(["ip", "-j", "address", "show", "dev", DEVICE]));
    const batch = addressBatch(this.have, want);
    if (!batch.length) return;
    try {
      await this.exec.run(["ip", "-batch", "-"], batch.join("\n") + "\n");
      this.have = new Set(want);
    } catch (err) {
      this.have = undefined; // part of the batch may have gone in: read again next time
      throw err;
    }
  }

  /** `--cleanup`: the device and every address on it */
  async cleanup(): Promise<void> {
    await this.exec.run(["ip", "link", "del", DEVICE]).catch(() => {});
    this.have = undefined;
  }
}
