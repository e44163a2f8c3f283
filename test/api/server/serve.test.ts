// `kpng serve` driven by independent clients: buf curl (gRPC over h2c, the
// repo's proto/ as schema), plain curl (the Connect protocol, HTTP/1.1 and
// HTTP/2), and kpng's own client library.

import { clone, fromBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Brain } from "../../../src/core/brain/brain.ts";
import { connectGrpc } from "../../../src/core/api/client/grpc.ts";
import type { ChangeSet } from "../../../src/core/wire/ops.ts";
import { watchChangeSets } from "../../../src/core/api/client/streams.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import type { NodeState } from "../../../src/core/brain/state.ts";
import { startFileSource } from "../../../src/core/sources/file.ts";
import { EndpointSchema, ServiceSchema, Set as SetKind } from "../../../src/gen/localv1/services_pb.ts";
import { bufCurl } from "../../harness/buf-curl.ts";
import { BUF, ROOT, startServe, tempDir, type KpngProcess } from "../../harness/kpng-process.ts";
import { curlSocket } from "../../harness/socket-curl.ts";

const dir = tempDir();
const input = join(dir.path, "cluster.yaml");
const sock = join(dir.path, "api.sock");
let serve: KpngProcess & { addresses: { kind: string; port?: number }[] };
let tcpPort = 0;

/** What an in-process brain computes from the same file. */
async function expectedState(node: string): Promise<NodeState> {
  const brain = new Brain();
  const src = await startFileSource({ path: input, brain, log: memoryLogger(), watch: false });
  src.close();
  return brain.view(node).state!;
}

const overSocket = ["--unix-socket", sock];

/** curl with a Connect streaming body (one JSON message); envelopes of the response. */
async function curlConnect(path: string, json: string, http: "--http1.1" | "--http2-prior-knowledge") {
  const msg = Buffer.from(json);
  const env = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), msg]);
  env.writeUInt32BE(msg.length, 1);
  const out = await curlSocket({ sock, path, type: "application/connect+json", body: env, flags: [http, "-w", "\n%{http_code}"] });
  const nl = out.lastIndexOf("\n");
  const status = Number(out.subarray(nl + 1).toString());
  const body = out.subarray(0, nl);
  const envelopes: Array<{ flags: number; json: any }> = [];
  for (let pos = 0; pos + 5 <= body.length; ) {
    const len = body.readUInt32BE(pos + 1);
    envelopes.push({ flags: body[pos], json: JSON.parse(body.subarray(pos + 5, pos + 5 + len).toString()) });
    pos += 5 + len;
  }
  return { status, envelopes };
}

beforeAll(async () => {
  dir.create();
  copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
  serve = await startServe(["--input", input, "--node-name", "node-1", "--listen", `unix://${sock}`, "--listen", "tcp://127.0.0.1:0"]);
  tcpPort = serve.addresses.find((a) => a.kind === "tcp")!.port!;
});
afterAll(async () => {
  await serve?.stop();
  dir.remove();
});

describe("buf curl, gRPC over h2c on the unix socket", () => {
  test("Watch: Reset, the node's full state (services first, paths ns/name and ns/svc/key), Sync", async () => {
    const { code, messages } = await bufCurl("http://localhost/localv1.Sets/Watch", '{"NodeName":"node-2"}', overSocket);
    expect(code).toBe(0);
    expect(messages[0]).toEqual({ Reset: {} });
    expect(messages.at(-1)).toEqual({ Sync: {} });
    const want = await expectedState("node-2");
    const sets = messages.slice(1, -1).map((m) => m.Set);
    const services = sets.filter((s) => s.Ref.Set === "ServicesSet");
    const endpoints = sets.filter((s) => s.Ref.Set === "EndpointsSet");
    expect(sets).toEqual([...services, ...endpoints]);
    expect(services.map((s) => s.Ref.Path).sort()).toEqual([...want.services.keys()].sort());
    for (const s of services)
      expect(fromBinary(ServiceSchema, Buffer.from(s.Bytes, "base64"))).toEqual(want.services.get(s.Ref.Path)!.service);
    const wantEndpoints = [...want.services].flatMap(([k, se]) => [...se.endpoints.keys()].map((e) => `${k}/${e}`));
    expect(endpoints.map((s) => s.Ref.Path).sort()).toEqual(wantEndpoints.sort());
    for (const s of endpoints) {
      const [ns, svc, key] = s.Ref.Path.split("/");
      // as messages: the brain's endpoints keep $typeName on their prototype (brain/model/endpoints.ts)
      expect(fromBinary(EndpointSchema, Buffer.from(s.Bytes, "base64"))).toEqual(
        clone(EndpointSchema, want.services.get(`${ns}/${svc}`)!.endpoints.get(key)!),
      );
    }
  });

  test("Next: first the (InstanceID, Rev, NodeName) for the next call, then one item per service", async () => {
    const { code, messages } = await bufCurl("http://localhost/localv1.Endpoints/Next", '{"NodeName":"node-3"}', overSocket);
    expect(code).toBe(0);
    const want = await expectedState("node-3");
    expect(messages[0].Next).toMatchObject({ Rev: "1", NodeName: "node-3" });
    expect(BigInt(messages[0].Next.InstanceID)).toBeGreaterThan(0n);
    const items = messages.slice(1).map((m) => m.Endpoints);
    expect(items.map((e) => `${e.Service.Namespace}/${e.Service.Name}`).sort()).toEqual([...want.services.keys()].sort());
    const web = items.find((e) => e.Service.Name === "web");
    expect(web.EndpointKeys).toEqual([...want.services.get("shop/web")!.endpoints.keys()]);
  });

  test("Next on loopback TCP, empty filter: the brain's own node", async () => {
    const { code, messages } = await bufCurl(`http://127.0.0.1:${tcpPort}/localv1.Endpoints/Next`, "{}");
    expect(code).toBe(0);
    expect(messages[0].Next.NodeName).toBe("node-1");
  });

  test("Watch with an unknown node name: NotFound with the reason; the brain keeps serving", async () => {
    const bad = await bufCurl("http://localhost/localv1.Sets/Watch", '{"NodeName":"node-9"}', overSocket);
    expect(bad.code).not.toBe(0);
    expect(bad.err).toContain("not_found");
    expect(bad.err).toContain('node \\"node-9\\" is not a Node in the cluster');
    const ok = await bufCurl("http://localhost/localv1.Endpoints/Next", '{"NodeName":"node-1"}', overSocket);
    expect(ok.code).toBe(0);
  });

  test("Watch: each further WatchReq gets the next change set; an input file edit arrives as one", async () => {
    const p = Bun.spawn(
      [
        BUF,
        "curl",
        "--protocol",
        "grpc",
        "--http2-prior-knowledge",
        "--schema",
        join(ROOT, "proto"),
        ...overSocket,
        "-d",
        "@-",
        "http://localhost/localv1.Sets/Watch",
      ],
      { cwd: ROOT, stdin: "pipe", stdout: "pipe", stderr: "pipe" },
    );
    p.stdin.write('{"NodeName":"node-1"}\n');
    p.stdin.flush();
    let out = "";
    const reader = p.stdout.getReader();
    const syncs = async (n: number) => {
      while ((out.match(/"Sync"/g) ?? []).length < n) {
        const r = await reader.read();
        if (r.done) throw new Error(`buf curl ended: ${out}`);
        out += new TextDecoder().decode(r.value);
      }
    };
    await syncs(1);
    const before = out.length;
    const text = readFileSync(input, "utf8");
    // shop/web's only other pod on node-1's zone: mark web-2 not ready
    writeFileSync(input, text.replace(/(- addresses:\n\s+- 198\.19\.2\.10\n\s+conditions:\n\s+ready:) true/, "$1 false"));
    p.stdin.write('{"NodeName":"node-1"}\n');
    p.stdin.flush();
    await syncs(2);
    p.stdin.end();
    await p.exited;
    writeFileSync(input, text);
    const second = JSON.parse(
      `[${out
        .slice(before)
        .trim()
        .replace(/\n}\n{/g, "},{")}]`,
    );
    expect(second).toEqual([{ Delete: { Set: "EndpointsSet", Path: "shop/web/web-2" } }, { Sync: {} }]);
  });
});

describe("curl, the Connect protocol", () => {
  test("Next over HTTP/1.1: the items as JSON envelopes, then the end-of-stream envelope", async () => {
    const { status, envelopes } = await curlConnect("/localv1.Endpoints/Next", '{"NodeName":"node-1"}', "--http1.1");
    expect(status).toBe(200);
    expect(envelopes[0].json.Next.NodeName).toBe("node-1");
    const want = await expectedState("node-1");
    expect(envelopes.filter((e) => e.flags === 0).length).toBe(1 + want.services.size);
    expect(envelopes.at(-1)).toEqual({ flags: 2, json: {} });
  });

  test("Watch over HTTP/1.1: 505, the Connect protocol needs HTTP/2 for a bidi stream", async () => {
    expect((await curlConnect("/localv1.Sets/Watch", '{"NodeName":"node-1"}', "--http1.1")).status).toBe(505);
  });

  test("Watch over h2c: Reset, the state, Sync as JSON envelopes", async () => {
    const { status, envelopes } = await curlConnect("/localv1.Sets/Watch", '{"NodeName":"node-1"}', "--http2-prior-knowledge");
    expect(status).toBe(200);
    const msgs = envelopes.filter((e) => e.flags === 0).map((e) => Object.keys(e.json)[0]);
    expect(msgs[0]).toBe("Reset");
    expect(msgs.at(-1)).toBe("Sync");
    expect(msgs.filter((m) => m === "Set").length).toBeGreaterThan(10);
  });

  test("a malformed WatchReq (not protobuf): InvalidArgument; the brain keeps serving", async () => {
    const garbage = Buffer.from([0, 0, 0, 0, 3, 0xff, 0xff, 0xff]);
    const p = Bun.spawn(
      [
        "curl",
        "-sS",
        "--http2-prior-knowledge",
        "--unix-socket",
        sock,
        "-H",
        "Content-Type: application/grpc",
        "-H",
        "TE: trailers",
        "--data-binary",
        "@-",
        "-D",
        "-",
        "-o",
        "/dev/null",
        "http://localhost/localv1.Sets/Watch",
      ],
      { stdin: garbage, stdout: "pipe" },
    );
    const headers = await new Response(p.stdout).text();
    expect(headers).toMatch(/grpc-status: 3/);
    expect(headers).toMatch(/grpc-message: cannot%20decode%20localv1.WatchReq/);
    expect((await curlConnect("/localv1.Endpoints/Next", "{}", "--http1.1")).status).toBe(200);
  });
});

describe("the socket", () => {
  test("is created with mode 0660", () => {
    const st = statSync(sock);
    expect(st.isSocket()).toBe(true);
    expect(st.mode & 0o777).toBe(0o660);
  });

  test("is removed when the brain exits on SIGTERM", async () => {
    const other = join(dir.path, "other.sock");
    const p = await startServe(["--input", input, "--listen", `unix://${other}`]);
    expect(statSync(other).isSocket()).toBe(true);
    expect(await p.stop("SIGTERM")).toBe(0);
    expect(() => statSync(other)).toThrow();
  });
});

test("kpng's client library over the unix socket: an input file edit is one change set", async () => {
  const conn = connectGrpc({ kind: "unix", path: sock });
  const ac = new AbortController();
  const it = watchChangeSets(conn, "node-2", ac.signal)[Symbol.asyncIterator]();
  const first = (await it.next()).value as ChangeSet;
  expect(first.reset).toBe(true);
  const text = readFileSync(input, "utf8");
  writeFileSync(input, text.replace("port: 8080\n          targetPort: 8080", "port: 8081\n          targetPort: 8080"));
  try {
    const cs = (await it.next()).value as ChangeSet;
    expect(cs.reset).toBe(false);
    expect(
      cs.ops.map((o) => `${o.op} ${o.op === "set" && o.set === SetKind.ServicesSet ? "service" : "endpoint"} ${"path" in o ? o.path : ""}`),
    ).toEqual(["set service shop/api"]);
  } finally {
    writeFileSync(input, text);
    ac.abort();
    conn.close();
  }
});

test("garbage on the socket (bad preface, cut connections, HTTP/1.1 without Host) never stops the brain", async () => {
  const { connect } = await import("node:net");
  const send = (data: string) =>
    new Promise<void>((resolve) => {
      const c = connect(sock, () => {
        c.write(Buffer.from(data, "latin1"));
        setTimeout(() => (c.destroy(), resolve()), 100);
      });
      c.on("error", () => resolve());
    });
  await send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\xff".repeat(100));
  await send("PRI * HTT");
  await send("GARBAGE\r\n\r\n\xff\xff");
  await send("POST /localv1.Endpoints/Next HTTP/1.1\r\nContent-Length: 100000\r\n\r\nabc");
  await send("");
  expect(serve.proc.exitCode).toBeNull();
  // logged as one line, not thrown out of the request handler
  expect(serve.stderr.join("\n")).not.toMatch(/^\s+at /m);
  const { code } = await bufCurl("http://localhost/localv1.Endpoints/Next", "{}", overSocket);
  expect(code).toBe(0);
});
