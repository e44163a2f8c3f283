// Go's time.Duration text form, as kube-proxy configuration files carry it
// (metav1.Duration): "30s", "1m0s", "1h30m", "500ms". Parsed to seconds and
// printed back exactly as Go's Duration.String() does, so a written
// configuration reads like one kube-proxy wrote.

const units: Record<string, number> = { ns: 1, us: 1e3, µs: 1e3, μs: 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 };
const part = /(\d*)(?:\.(\d*))?(ns|us|µs|μs|ms|s|m|h)/y;

/** Seconds, or null when `s` is not a Go duration. "0" alone is allowed, as in Go. */
export function parseGoDuration(s: string): number | null {
  let i = 0;
  let sign = 1;
  if (s[0] === "-" || s[0] === "+") {
    sign = s[0] === "-" ? -1 : 1;
    i = 1;
  }
  if (s.slice(i) === "0") return 0;
  if (i === s.length) return null;
  let ns = 0;
  while (i < s.length) {
    part.lastIndex = i;
    const m = part.exec(s);
    if (!m || (m[1] === "" && !m[2])) return null;
    const whole = Number(m[1] || "0");
    const frac = m[2] ? Number(`0.${m[2]}`) : 0;
    ns += (whole + frac) * units[m[3]];
    i = part.lastIndex;
  }
  return (sign * Math.round(ns)) / 1e9;
}

const frac = (n: number, unit: number): string => {
  const whole = Math.floor(n / unit);
  const rest = n - whole * unit;
  if (rest === 0) return String(whole);
  const digits = String(rest)
    .padStart(String(unit).length - 1, "0")
    .replace(/0+$/, "");
  return `${whole}.${digits}`;
};

/** Go's Duration.String(): 0s, 500ms, 1.5s, 1m0s, 1h0m0s. */
export function formatGoDuration(seconds: number): string {
  let ns = Math.round(seconds * 1e9);
  if (ns === 0) return "0s";
  const sign = ns < 0 ? "-" : "";
  ns = Math.abs(ns);
  if (ns < 1e3) return `${sign}${ns}ns`;
  if (ns < 1e6) return `${sign}${frac(ns, 1e3)}µs`;
  if (ns < 1e9) return `${sign}${frac(ns, 1e6)}ms`;
  const h = Math.floor(ns / 3600e9);
  ns -= h * 3600e9;
  const m = Math.floor(ns / 60e9);
  ns -= m * 60e9;
  const s = `${frac(ns, 1e9)}s`;
  return sign + (h ? `${h}h${m}m${s}` : m ? `${m}m${s}` : s);
}
