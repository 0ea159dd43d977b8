import { cp, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { build } from "rolldown";

// Bundles the server as JavaScript for Node, into dist/node/ (run it with `node dist/node/index.js`):
// Node strips the types of every TypeScript file it loads with a compiler of its own and keeps
// what it loaded, and its loader keeps a record per module file (zod alone has hundreds): the server
// bundled, packages included, held about 40 MiB less at idle (bench:runtimes). The files our code
// opens beside itself
// (the web page's assets, the hashing workers) are copied next to the bundle, where its
// `new URL(..., import.meta.url)` finds them.
//
//   npm run bundle

const root = join(import.meta.dirname, "..");
const out = join(root, "dist", "node");

await rm(out, { recursive: true, force: true });
await build({
  input: join(root, "src", "index.ts"),
  platform: "node",
  output: { dir: out, format: "esm" },
  logLevel: "warn",
});
await cp(join(root, "src", "web", "assets"), join(out, "assets"), { recursive: true });
const store = join(root, "src", "models", "store");
for (const name of await readdir(store)) if (name.endsWith(".js")) await cp(join(store, name), join(out, name));
console.log(`bundled into ${out}`);
