import { isIP } from "node:net";

// Which addresses a media URL may reach: the public internet only. Everything this host or its
// networks answer on (loopback, private ranges, link-local, carrier-grade NAT, multicast, reserved
// and documentation ranges) is refused, IPv4 and IPv6, and an IPv4 address inside an IPv6 one
// (mapped, NAT64, 6to4) is judged as the IPv4 address it carries.

/** IPv4 ranges that are not public: [first octets as a 32-bit number, prefix length]. */
const V4_NOT_PUBLIC: [string, number][] = [
  ["0.0.0.0", 8], // "this network"
  ["10.0.0.0", 8], // private
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local (cloud metadata services live here)
  ["172.16.0.0", 12], // private
  ["192.0.0.0", 24], // IETF protocol assignments
  ["192.0.2.0", 24], // documentation
  ["192.88.99.0", 24], // 6to4 relay anycast
  ["192.168.0.0", 16], // private
  ["198.18.0.0", 15], // benchmarking
  ["198.51.100.0", 24], // documentation
  ["203.0.113.0", 24], // documentation
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, and the broadcast address
];

const v4Number = (address: string) => address.split(".").reduce((n, octet) => n * 256 + Number(octet), 0);
const V4_RANGES = V4_NOT_PUBLIC.map(([base, bits]) => ({ base: v4Number(base), size: 2 ** (32 - bits) }));

function isPublicV4(address: string): boolean {
  const n = v4Number(address);
  return !V4_RANGES.some(({ base, size }) => n >= base && n < base + size);
}

/** The eight 16-bit groups of an IPv6 address (a trailing dotted IPv4 part becomes two groups). */
function v6Groups(address: string): number[] {
  let text = address.toLowerCase().replace(/%.*$/, "");
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)?.[1];
  if (dotted) {
    const n = v4Number(dotted);
    text = `${text.slice(0, -dotted.length)}${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
  }
  const [head, tail] = text.split("::") as [string, string | undefined];
  const parse = (part: string | undefined) => (part ? part.split(":").map((g) => parseInt(g, 16)) : []);
  const first = parse(head);
  const last = parse(tail);
  return tail === undefined ? first : [...first, ...Array(8 - first.length - last.length).fill(0), ...last];
}

const v4Of = (high: number, low: number) => `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;

function isPublicV6(address: string): boolean {
  const g = v6Groups(address);
  // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d): the IPv4 address decides.
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) return isPublicV4(v4Of(g[6]!, g[7]!));
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) return isPublicV4(v4Of(g[6]!, g[7]!));
  // 6to4 (2002:a.b.c.d::/16) carries its IPv4 address in the next two groups.
  if (g[0] === 0x2002) return isPublicV4(v4Of(g[1]!, g[2]!));
  // Only global unicast (2000::/3) is public; within it, documentation (2001:db8::/32) and the
  // IETF's special block (2001::/23: Teredo, benchmarking, ORCHID...) are not.
  if ((g[0]! & 0xe000) !== 0x2000) return false;
  if (g[0] === 0x2001 && (g[1] === 0x0db8 || g[1]! < 0x0200)) return false;
  return true;
}

/** Whether `address` (an IP address, as a resolver gives it or a URL names it) is on the public internet. */
export function isPublicAddress(address: string): boolean {
  const bare = address.replace(/^\[(.*)\]$/, "$1");
  const family = isIP(bare.replace(/%.*$/, ""));
  if (family === 4) return isPublicV4(bare);
  if (family === 6) return isPublicV6(bare);
  return false;
}

/** Whether `host` (a URL's hostname) is an IP address rather than a name. */
export const isAddress = (host: string) => isIP(host.replace(/^\[(.*)\]$/, "$1")) !== 0;
