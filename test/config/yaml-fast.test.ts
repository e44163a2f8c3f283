// The fast YAML path of the files kpng reads at start-up (kubeconfig,
// kube-proxy's configuration): it must give the `yaml` library's value, and
// leave to that library every text with a repeated key (which kpng refuses,
// naming it) or anything the scan cannot prove.

import { describe, expect, test } from "bun:test";
import { parseDocument } from "yaml";
import { fastYaml, mayRepeatKeys } from "../../src/core/config/yaml-fast.ts";

/** the `yaml` library's verdict: the value, and whether a key repeats */
const library = (text: string) => {
  const doc = parseDocument(text, { uniqueKeys: true });
  return { value: doc.errors.length ? undefined : (doc.toJS() as unknown), repeats: doc.errors.some((e) => e.code === "DUPLICATE_KEY") };
};

const KUBECONFIG = `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lCQURBS0JnZ3Foa2pPUFFRREFqQWpNU0V3SHdZRFZRUUREQmhyTTNNdGMyVnkK
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      args: ["--region", "eu-west-1"]
      command: aws
      env:
      - name: AWS_PROFILE
        value: "prod"
`;

describe("the fast path gives the yaml library's value", () => {
  const cases: Array<{ name: string; text: string }> = [
    { name: "kubectl's kubeconfig", text: KUBECONFIG },
    { name: "the same with CRLF line ends", text: KUBECONFIG.replaceAll("\n", "\r\n") },
    {
      name: "comments, a document start, quoted keys",
      text: `# written by hand\n---\n"apiVersion": v1\n'kind': Config # trailing\nclusters: []\n`,
    },
    {
      name: "a block scalar whose lines look like keys",
      text: "users:\n- name: u\n  user:\n    token: |\n      name: u\n      token: x\n    username: a\n",
    },
    {
      name: "a folded plain scalar over several lines",
      text: "clusters:\n- name: c\n  cluster:\n    certificate-authority-data: LS0t\n      LS1C\n      RUdJ\n    server: https://x\n",
    },
    {
      name: "one-line flow mappings of plain names",
      text: "users:\n- name: tester\n  user: { token: test-token }\ncontexts:\n- name: fake\n  context: {cluster: fake, user: tester}\npreferences: {}\n",
    },
    { name: "sequences of sequences", text: "a:\n- - x: 1\n    y: 2\n  - x: 3\n- - x: 4\n" },
    {
      name: "kube-proxy's configuration",
      text: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nclientConnection:\n  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\n  qps: 5\nconntrack:\n  maxPerCore: null\n  tcpEstablishedTimeout: 24h0m0s\n",
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      expect(mayRepeatKeys(c.text)).toBe(false);
      expect(fastYaml(c.text)).toEqual(library(c.text).value as never);
    });
  }
});

describe("a key that repeats is always left to the yaml library (which names it)", () => {
  const cases: Array<{ name: string; text: string }> = [
    { name: "at the top", text: "kind: Config\ncurrent-context: a\ncurrent-context: b\n" },
    { name: "in a nested mapping", text: "a:\n  b: 1\n  c:\n    d: 1\n  b: 2\n" },
    { name: "in a sequence item", text: "users:\n- name: u\n  user:\n    token: a\n  name: v\n" },
    { name: "in a sequence item, on the dash's line", text: "users:\n- name: u\n  name: v\n" },
    { name: "quoted and plain", text: 'users:\n- name: u\n  "name": v\n' },
    { name: "after a block scalar", text: "a:\n  token: |\n    x\n  token: y\n" },
    { name: "with CRLF", text: "a: 1\r\nb: 2\r\na: 3\r\n" },
    { name: "in a flow mapping", text: "a: { b: 1, b: 2 }\n" },
    { name: "in a flow mapping, one quoted", text: 'a: { b: 1, "b": 2 }\n' },
    { name: "a null key twice", text: "null: 1\n~: 2\n" },
    { name: "in JSON", text: '{"a": 1, "a": 2}' },
  ];
  for (const c of cases) {
    test(c.name, () => {
      expect(library(c.text).repeats).toBe(true);
      expect(mayRepeatKeys(c.text)).toBe(true);
      expect(fastYaml(c.text)).toBeUndefined();
    });
  }
});

describe("what the scan cannot prove goes to the yaml library", () => {
  const cases: Array<{ name: string; text: string }> = [
    { name: "a flow mapping with a quoted value", text: 'a: { b: "1" }\n' },
    { name: "a flow mapping in a flow mapping", text: "a: { b: { c: 1 } }\n" },
    { name: "a merge key", text: "x: &x\n  b: 1\na:\n  <<: *x\n  c: 2\n" },
    { name: "a tag", text: "a: !!str 1\n" },
    { name: "two documents", text: "a: 1\n---\na: 2\n" },
    { name: "a key that is a number", text: "1: a\n" },
    { name: "a quoted value over two lines", text: 'a: "x\n  y"\n' },
    { name: "a tab in the indentation", text: "a:\n\tb: 1\n" },
    { name: "not YAML", text: "clusters: [\n" },
    { name: "empty", text: "" },
  ];
  for (const c of cases) test(c.name, () => expect(fastYaml(c.text)).toBeUndefined());
});

test("generated documents: never a repeated key missed, never another value", () => {
  // a tiny deterministic generator of block-style documents with keys drawn from a small set, so repeats are common
  let seed = 7;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const keys = ["name", "user", "token", "server", '"name"', "'token'", "a-b", "x.y"];
  const scalars = [
    "v",
    '"q: x"',
    "'s'",
    "1",
    "true",
    "null",
    "{}",
    "[a, b]",
    "|\n",
    "# c",
    "{ name: a, token: b }",
    "{ user: a, user: b }",
    "{a: 1,b: }",
  ];
  const block = (indent: number, depth: number): string[] => {
    const out: string[] = [];
    const pad = " ".repeat(indent);
    for (let i = 0, n = 1 + rand(3); i < n; i++) {
      const key = keys[rand(keys.length)];
      const kind = depth > 2 ? 0 : rand(3);
      if (kind === 0) {
        const s = scalars[rand(scalars.length)];
        if (s === "|\n") out.push(`${pad}${key}: |`, `${pad}  ${keys[rand(keys.length)]}: text`);
        else out.push(`${pad}${key}: ${s}`);
      } else if (kind === 1) out.push(`${pad}${key}:`, ...block(indent + 2, depth + 1));
      else {
        out.push(`${pad}${key}:`);
        for (let j = 0, m = 1 + rand(2); j < m; j++) {
          const [first, ...rest] = block(indent + 2, depth + 1);
          out.push(`${pad}- ${first.slice(indent + 2)}`, ...rest);
        }
      }
    }
    return out;
  };
  // The generator comes back to the same documents (343 distinct texts in 3,000): each distinct
  // text is checked once and counted each time it comes, as the functions are pure. The yaml
  // library's verdict costs 1-3 ms of CPU a document: 3,000 of them were 3 s, most of the unit set's.
  const verdicts = new Map<string, { repeats: boolean; fast: boolean }>();
  let fast = 0;
  let repeats = 0;
  for (let i = 0; i < 3000; i++) {
    const text = block(0, 0).join("\n") + "\n";
    let verdict = verdicts.get(text);
    if (!verdict) {
      const lib = library(text);
      verdict = { repeats: lib.repeats, fast: !mayRepeatKeys(text) };
      verdicts.set(text, verdict);
      if (verdict.fast) {
        expect({ text, repeats: lib.repeats }).toEqual({ text, repeats: false });
        expect({ text, value: fastYaml(text) }).toEqual({ text, value: lib.value as never });
      }
    }
    if (verdict.repeats) repeats++;
    if (verdict.fast) fast++;
  }
  // the generator is useful only if both kinds are common
  expect(fast).toBeGreaterThan(300);
  expect(repeats).toBeGreaterThan(300);
});
