import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { loadConfig } from "../../src/config.ts";
import { SESSION_HEADERS } from "../../src/inference/session.ts";
import { HEALTH_PATHS } from "../../src/pod/health.ts";
import { projectRoot } from "../support/server-process.ts";

// deploy/compose.yaml read as text: the pool's replicas, the gateway that checks their readiness,
// and the GPU file that gives each its own GPU. Run for real in compose-run.test.ts.

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const read = (file: string) => parse(readFileSync(join(projectRoot, "deploy", file), "utf8"), { merge: true }) as any;
const compose = read("compose.yaml");
const gpu = read("compose.gpu.yaml");
const replicas = Object.entries(compose.services as Record<string, any>).filter(([, s]) => s.profiles?.includes("pool") && s.image?.startsWith("llamadock"));
const gateway = readFileSync(join(projectRoot, "deploy", "haproxy.cfg"), "utf8");

describe("the compose file", () => {
  it("has a pool of two replicas on the default service's model volume", () => {
    expect(replicas.map(([name]) => name)).toEqual(["llamadock-1", "llamadock-2"]);
    for (const [, replica] of replicas) expect(replica.volumes).toEqual(compose.services.llamadock.volumes);
  });

  it("sends the gateway's requests to every replica, on the port they listen on", () => {
    const servers = [...gateway.matchAll(/^\s*server \S+ (\S+):(\d+)/gm)].map((m) => [m[1], Number(m[2])]);
    const port = loadConfig({ SERVICES: "runner" }, []).runner.port;
    expect(servers).toEqual(replicas.map(([name]) => [name, port]));
    expect(compose.services.gateway.depends_on).toEqual(replicas.map(([name]) => name));
    expect(compose.services.gateway.volumes).toEqual(["./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"]);
  });

  it("checks readiness on a health route that a replica's settings leave open without a key", () => {
    const path = /option httpchk GET (\S+)/.exec(gateway)![1]!;
    expect(path).toBe("/readyz");
    expect(HEALTH_PATHS).toContain(path);
    const env = { ...replicas[0]![1].environment, API_KEYS: "k" };
    expect(loadConfig(env, []).security.openPaths).toContain(path);
  });

  it("keeps an agent session on one replica by the headers llamadock reads sessions from, others by the fewest open requests", () => {
    expect(/^\s*balance (\S+)/m.exec(gateway)![1]).toBe("leastconn");
    const sticky = [...gateway.matchAll(/^\s*stick on req\.hdr\(([^)]+)\)/gm)].map((m) => m[1]);
    expect(sticky).toEqual(SESSION_HEADERS);
    // As long as the names llamadock keeps (longer ones are cut the same way by both).
    expect(Number(/stick-table type string len (\d+)/.exec(gateway)![1])).toBeGreaterThanOrEqual(200);
  });

  it("with the GPU file, gives the default service a GPU and each replica its own", () => {
    expect(gpu.services.llamadock.deploy.resources.reservations.devices[0]).toMatchObject({ driver: "nvidia", count: 1 });
    const ids = replicas.map(([name]) => gpu.services[name].deploy.resources.reservations.devices[0].device_ids);
    expect(ids).toEqual([["0"], ["1"]]);
    for (const name of ["llamadock", ...replicas.map(([n]) => n)]) {
      expect(gpu.services[name].image).toBe("llamadock:cuda");
      expect(gpu.services[name].build.args.LLAMA_BUILD_IMAGE).toMatch(/^nvidia\/cuda:.+-devel-/);
    }
  });
});
