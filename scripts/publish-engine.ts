import { env } from "node:process";
import { cachedBuildDir } from "../sidecar/binary.ts";
import { loadConfig } from "../src/config.ts";
import { publishEngine } from "../src/engines/publish.ts";

// Publishes the llama-server that `npm run sidecar:build` built (or the folder given) as an engine
// image in llama.cpp's layout, to be pulled with `llamadock engine pull`. The registry's
// credentials and plain-HTTP hosts are the server's own settings (REGISTRY_CREDENTIALS,
// REGISTRY_INSECURE).
//
//   npm run engine:publish -- [--dmr <variant>] <registry>/<namespace>/llama-server:<tag> [folder]
//
// `--dmr cpu` writes Docker Model Runner's layout instead of llama.cpp's.

const args = process.argv.slice(2);
const dmr = args[0] === "--dmr" ? args.splice(0, 2)[1] : undefined;
const [reference, folder = cachedBuildDir(env)] = args;
if (!reference || (dmr !== undefined && !/^[a-z0-9-]+$/.test(dmr))) {
  console.error("usage: npm run engine:publish -- [--dmr <variant>] <registry>/<namespace>/llama-server:<tag> [folder of llama-server and its libraries]");
  process.exit(2);
}
const { models } = loadConfig(env, []);
const published = await publishEngine(folder, reference, {
  fetch: globalThis.fetch.bind(globalThis),
  insecureHosts: models.insecureRegistries,
  credentials: models.registryCredentials,
}, dmr ? { kind: "docker-model-runner", variant: dmr } : { kind: "llama.cpp" });
console.log(`published ${folder} as ${published.reference} (manifest ${published.digest})`);
