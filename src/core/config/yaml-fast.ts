// A fast parse for the YAML files a person writes and kpng reads at every
// start (the kubeconfig, kube-proxy's configuration): Bun's native parser,
// which takes the last of repeated keys, plus a scan that proves no mapping
// repeats a key. Anything the scan cannot prove (flow mappings, complex or
// merge keys, tags, several documents, keys that are not plain names) goes
// to the caller's `yaml` library parse, which says exactly what is wrong and
// where: the fast path never accepts what that parse refuses, and never
// gives another value. The `yaml` library's first parse in a process runs
// cold code, a visible share of start-up (docs/results/2026-11.md).

/** The value of `text`, or undefined when the caller must parse it with the `yaml` library (an error, or a key that may repeat). */
export function fastYaml(text: string): unknown {
  if (mayRepeatKeys(text)) return undefined;
  try {
    // null (an empty file) too goes to the caller's parse, which says what it lacks
    return (Bun.YAML.parse(text) as unknown) ?? undefined;
  } catch {
    return undefined;
  }
}

/** a plain key the scan compares as written: a name, never a number, boolean or null */
const PLAIN_KEY = /^[A-Za-z_$][\w.$/-]*$/;
const NOT_A_STRING = /^(?:null|Null|NULL|true|True|TRUE|false|False|FALSE)$/;
/** a key and the rest of its line: `key: value`, `key:`, `"key": value`, `'key': value` */
const KEY_LINE = /^(?:"([^"\\]*)"|'([^']*)'|([^\s"'#][^#]*?))[ \t]*:(?:[ \t]+(.*))?$/;
const BLOCK_SCALAR = /^[|>][-+0-9]*[ \t]*(?:#.*)?$/;

/**
 * Whether some mapping of `text` may hold a key twice: false only when every
 * key line is a plain name or a simply quoted one in block style, so that
 * mappings are told apart by indentation and sequence dashes alone.
 */
export function mayRepeatKeys(text: string): boolean {
  /** the open mappings, innermost last: the column of their keys, the keys seen */
  const open: Array<{ col: number; keys: Set<string> }> = [];
  /** inside a block scalar (`key: |`): lines indented deeper than this column are its text */
  let blockAt = -1;
  let content = false;
  for (const raw of text.split("\n")) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    let col = 0;
    while (line[col] === " ") col++;
    if (col === line.length || line[col] === "#") continue;
    if (blockAt >= 0) {
      if (col > blockAt) continue;
      blockAt = -1;
    }
    if (line[col] === "\t") return true;
    if (col === 0 && (line.startsWith("---") || line.startsWith("...") || line.startsWith("%"))) {
      if (content || line[0] === "%" || line.slice(3).trim()) return true;
      continue;
    }
    content = true;
    // `- ` entries: a key after a dash starts a new mapping at its own column
    let entry = false;
    while (line[col] === "-" && (col + 1 === line.length || line[col + 1] === " ")) {
      entry = true;
      col++;
      while (line[col] === " ") col++;
    }
    const rest = line.slice(col);
    if (!rest || rest[0] === "#") continue;
    if ("{[?&*!<|>%@`".includes(rest[0]) && !/^\[[^{]*\][ \t]*(?:#.*)?$/.test(rest)) return true;
    const m = KEY_LINE.exec(rest);
    if (!m) {
      // a scalar: a sequence item, or the continuation of a plain multi-line value
      if (/["'{]/.test(rest[0])) return true;
      continue;
    }
    const [, dq, sq, plain, value = ""] = m;
    const key = dq ?? sq ?? plain.trimEnd();
    if (plain !== undefined && (!PLAIN_KEY.test(key) || NOT_A_STRING.test(key))) return true;
    while (open.length && open[open.length - 1].col > col) open.pop();
    if (entry && open.length && open[open.length - 1].col === col) open.pop();
    let top = open[open.length - 1];
    if (!top || top.col < col) {
      top = { col, keys: new Set() };
      open.push(top);
    }
    if (top.keys.has(key)) return true;
    top.keys.add(key);
    const v = value.trim();
    if (!v || v[0] === "#") continue;
    if (BLOCK_SCALAR.test(v)) {
      blockAt = col;
      continue;
    }
    // flow mappings (but one-line ones of plain names and values), flow sequences over several lines, tags,
    // anchors, aliases, quotes left open: not for the scan
    if (/^[!&*]/.test(v) || (v.includes("{") && !plainFlowMapping(v))) return true;
    if (v[0] === "[" && !/^\[[^{\]]*\][ \t]*(?:#.*)?$/.test(v)) return true;
    if ((v[0] === '"' && !/^"(?:[^"\\]|\\.)*"[ \t]*(?:#.*)?$/.test(v)) || (v[0] === "'" && !/^'(?:[^']|'')*'[ \t]*(?:#.*)?$/.test(v)))
      return true;
  }
  return false;
}

/** a one-line flow mapping of plain names and plain values, none repeated: `{}`, `{ cluster: c, user: u }` */
function plainFlowMapping(v: string): boolean {
  const m = /^\{([^{}[\]"'#&*!]*)\}[ \t]*(?:#.*)?$/.exec(v);
  if (!m) return false;
  if (!m[1].trim()) return true;
  const keys = new Set<string>();
  for (const entry of m[1].split(",")) {
    const pair = /^\s*([^\s:][^:]*?)\s*:(?:\s+[^:]*?)?\s*$/.exec(entry);
    if (!pair || !PLAIN_KEY.test(pair[1]) || NOT_A_STRING.test(pair[1]) || keys.has(pair[1])) return false;
    keys.add(pair[1]);
  }
  return true;
}
