// The Kubernetes HTTP client (src/core/kube-http/): an answer that is not
// OK becomes an HttpStatusError carrying the API server's Status message,
// read as its Content-Type says. The client is a leaf room: a protobuf
// answer is read only by the reader its caller hands in (the sources hand
// sources/protobuf's), so a JSON-only caller (events, token review) never
// loads the object decoders.

import { afterAll, describe, expect, test } from "bun:test";
import type { KubeAccess } from "../../src/core/kube-http/access.ts";
import { JSON_TYPE, PROTOBUF_TYPE } from "../../src/core/kube-http/content.ts";
import { expectOK, HttpStatusError, kubeRequest, readObject } from "../../src/core/kube-http/request.ts";
import { protobufObject } from "../../src/core/sources/protobuf/envelope.ts";
import { encodeObject } from "../harness/protobuf-encode.ts";

const forbidden = {
  kind: "Status",
  apiVersion: "v1",
  status: "Failure",
  message: 'nodes "n1" is forbidden',
  reason: "Forbidden",
  code: 403,
};

// /json and /protobuf answer 403 with that Status in their encoding; /node answers a Node in protobuf.
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(req) {
    const path = new URL(req.url).pathname;
    if (path === "/json") return new Response(JSON.stringify(forbidden), { status: 403, headers: { "Content-Type": JSON_TYPE } });
    if (path === "/protobuf")
      return new Response(encodeObject("Status", forbidden), { status: 403, headers: { "Content-Type": PROTOBUF_TYPE } });
    if (path === "/node")
      return new Response(encodeObject("Node", { metadata: { name: "n1" } }), { headers: { "Content-Type": PROTOBUF_TYPE } });
    return new Response("{}", { status: 404 });
  },
});
afterAll(() => server.stop(true));

const access: KubeAccess = {
  server: `http://127.0.0.1:${server.port}`,
  tls: { insecure: false },
  credentials: async () => ({ refused() {} }),
};
const get = (path: string) => kubeRequest(access)({ path });
const refusal = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (err: unknown) => err as HttpStatusError,
  );

describe("expectOK: an answer not OK is an HttpStatusError with the Status message", () => {
  test("a JSON Status: its message", async () => {
    const err = await refusal(expectOK(await get("/json")));
    expect(err).toBeInstanceOf(HttpStatusError);
    expect(err?.statusCode).toBe(403);
    expect(err?.message).toBe('HTTP 403: nodes "n1" is forbidden');
  });

  test("a protobuf Status, read by the reader the caller hands in: its message", async () => {
    const err = await refusal(expectOK(await get("/protobuf"), [200], protobufObject));
    expect(err?.message).toBe('HTTP 403: nodes "n1" is forbidden');
  });

  test("a protobuf Status and no reader (a caller that asked for JSON): still the status, with the body's start as text", async () => {
    const err = await refusal(expectOK(await get("/protobuf")));
    expect(err?.statusCode).toBe(403);
    expect(err?.message).toStartWith("HTTP 403: k8s");
    expect(err?.message).toContain('nodes "n1" is forbidden');
  });

  test("a status the caller accepts passes", async () => {
    const res = await expectOK(await get("/json"), [403]);
    expect(res.statusCode).toBe(403);
    res.resume();
  });
});

describe("readObject", () => {
  test("a protobuf object through the reader handed in", async () => {
    const node = await readObject(await get("/node"), protobufObject);
    expect((node.metadata as { name: string }).name).toBe("n1");
  });

  test("a protobuf object without a reader is refused, not misread as JSON", async () => {
    await expect(readObject(await get("/node"))).rejects.toThrow("a protobuf answer, and no protobuf reader");
  });
});
