// Captures what `nft -f` sends the kernel for each kind of element kpng
// writes, the reference of the element encoder's tests
// (test/nft/netlink-batch.test.ts): in a fresh network namespace, every set
// and map of a full sync is created, then each `add element` statement below
// runs alone as `nft -f` under `strace -e trace=sendmsg -e write=all`, whose
// hex dump of the batch is cut into messages; the NFT_MSG_NEWSETELEM ones are
// kept, base64-encoded, with the statement. Run as root:
// `bun test/nft/netlink-batch-capture.ts`.

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { TABLE } from "../../plugins/nft/names.ts";
import { NftSync } from "../../plugins/nft/plan.ts";
import { printOp, Transaction, type Op, type SetSpec } from "../../plugins/nft/transaction.ts";
import { nodeConfig } from "./fixtures.ts";
import { batchCaptureState } from "./netlink-batch-cases.ts";
import { sh } from "./netlink-capture.ts";

/** test/nft/netlink-batch-captured.json, written by this script */
export interface Captured {
  /** `nft --version` and `uname -r` of the capture */
  nft: string;
  kernel: string;
  cases: CapturedCase[];
}

export interface CapturedCase {
  name: string;
  set: Extract<Op, { kind: "set" | "map" }> & { set: SetSpec };
  op: Extract<Op, { kind: "elements" }>;
  /** the NEWSETELEM messages nft sent, base64 */
  messages: string[];
}

const NEWSETELEM = (10 << 8) | 12;

/** the bytes of the one sendmsg in strace's output (its `write=all` hex dump) */
function sentBytes(strace: string): Uint8Array {
  const bytes: number[] = [];
  for (const line of strace.split("\n")) {
    const m = /^ \| [0-9a-f]{5} {2}((?:[0-9a-f]{2} {1,2}){1,16})/.exec(line);
    if (m) for (const h of m[1].trim().split(/\s+/)) bytes.push(Number.parseInt(h, 16));
  }
  return new Uint8Array(bytes);
}

function newSetElemMessages(batch: Uint8Array): string[] {
  const v = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  const out: string[] = [];
  for (let at = 0; at + 16 <= batch.byteLength; ) {
    const len = v.getUint32(at, true);
    if (v.getUint16(at + 4, true) === NEWSETELEM) out.push(Buffer.from(batch.subarray(at, at + len)).toString("base64"));
    at += (len + 3) & ~3;
  }
  return out;
}

if (import.meta.main) {
  const plan = new NftSync(nodeConfig()).plan(batchCaptureState(), null, {
    ip: { chains: new Map(), sets: new Map() },
    ip6: { chains: new Map(), sets: new Map() },
  });
  const skeleton = new Transaction();
  const sets = new Map<string, CapturedCase["set"]>();
  const ops: CapturedCase["op"][] = [];
  for (const op of plan.tx.ops) {
    if (op.kind === "elements" && op.verb === "add") ops.push(op);
    else skeleton.add(op);
    if ((op.kind === "set" || op.kind === "map") && op.verb === "add") sets.set(`${op.family} ${op.set.name}`, op);
  }
  const ns = `kpbc-${Math.random().toString(36).slice(2, 8)}`;
  sh(["ip", "netns", "add", ns]);
  const cases: CapturedCase[] = [];
  try {
    sh(["ip", "netns", "exec", ns, "nft", "-f", "-"], skeleton.print());
    for (const op of ops) {
      const set = sets.get(`${op.family} ${op.set}`);
      if (!set) throw new Error(`no set ${op.family} ${op.set}`);
      const trace = sh(
        ["ip", "netns", "exec", ns, "strace", "-e", "trace=sendmsg", "-e", "write=all", "-s", "0", "nft", "-f", "-"],
        `${printOp(op)}\n`,
      );
      // the element specs alone (the renderer's objects carry their owner too)
      const items = op.items.map(({ key, value, comment }) => ({ key, value, comment }));
      cases.push({ name: `${op.family} ${TABLE} ${op.set}`, set, op: { ...op, items }, messages: newSetElemMessages(sentBytes(trace)) });
    }
  } finally {
    sh(["ip", "netns", "del", ns]);
  }
  const nft = Bun.spawnSync(["nft", "--version"]).stdout.toString().trim();
  const kernel = Bun.spawnSync(["uname", "-r"]).stdout.toString().trim();
  // data, not code: one case a line, with what it was captured with
  const out = `{"nft": ${JSON.stringify(nft)}, "kernel": ${JSON.stringify(kernel)}, "cases": [\n${cases.map((c) => JSON.stringify(c)).join(",\n")}\n]}\n`;
  writeFileSync(join(import.meta.dir, "netlink-batch-captured.json"), out);
  console.log(`captured ${cases.length} statements, ${cases.reduce((n, c) => n + c.messages.length, 0)} messages`);
}
