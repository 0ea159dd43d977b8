import { readdirSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { ask } from "../support/http.ts";
import { buildImage, IMAGE, inCi, podmanUsable, startRegistryContainer, type Podman, type RegistryContainer } from "../support/podman.ts";
import { freePort, pushModel } from "../support/registry.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";
import { hasKubectl, render, type K8sObject } from "./manifests.ts";

// The cpu-example overlay, rendered with kubectl kustomize and played with `podman kube play`: the
// Deployment (its init container pulling the pinned model, the main container serving it), its
// ConfigMap, the claim as a podman volume, the API key Secret. podman plays Pods, Deployments,
// ConfigMaps, Secrets and claims; the other objects need a cluster and are left out (named below).
// What is changed from the rendering, and why, is in `playable`.

const usable = podmanUsable() && hasKubectl();
if (!usable && !inCi) console.warn("podman or kubectl cannot run here: the manifests are NOT played (scripts/setup.sh --test installs both; in CI this fails)");

const BUILD_TIMEOUT_MS = 60 * 60_000;
const PLAYED_KINDS = ["ConfigMap", "PersistentVolumeClaim", "Deployment"];

describe.skipIf(!usable && !inCi)("the cpu-example overlay, played with podman kube play", () => {
  const prefix = `llamadock-kube-test-${process.pid}`;
  let podman: Podman;
  let dir: string;
  let registry: RegistryContainer;
  let rendered: K8sObject[];
  let model: string;
  let target: { url: string };
  let played: string;
  let pod: string;
  let key: string;
  let blobs: string[];

  beforeAll(async () => {
    podman = await buildImage(BUILD_TIMEOUT_MS);
    dir = await mkdtemp(join(tmpdir(), "llamadock-kube-"));
    // podman's default network has no DNS: the pod reaches the registry at its address.
    registry = await startRegistryContainer(podman, `${prefix}-registry`, "podman", dir);
    const pushed = await pushModel(registry, "test/tiny", "latest", tinyLlamaGguf({ seed: 13 }));
    // What a pull keeps: the weights, and the artifact's config (so the model can be pushed as it came).
    blobs = [pushed.ggufDigest, pushed.configDigest].map((digest) => digest.replace("sha256:", "")).sort();
    model = `${registry.address}/test/tiny:latest`;
    rendered = render("overlays/cpu-example");
    const port = await freePort();
    target = { url: `http://127.0.0.1:${port}` };
    played = join(dir, "played.yaml");
    await writeFile(played, playable(rendered, port).map((o) => stringify(o)).join("---\n"));
    // Runs the init container to its end (the pull), then starts the server.
    await podman.run(["kube", "play", played], { timeoutMs: 600_000 });
    pod = `${prefix}-pod-0`;
    key = (await podman.run(["exec", `${pod}-llamadock`, "cat", "/etc/llamadock/api-keys/api-keys"])).stdout.trim();
  }, BUILD_TIMEOUT_MS + 900_000);

  afterAll(async () => {
    if (!podman) return;
    if (played) await podman.run(["kube", "down", played], { allowFailure: true });
    for (const volume of ["models", "run", "logs", "tmp", "api-keys"]) await podman.run(["volume", "rm", "--force", `${prefix}-${volume}`], { allowFailure: true });
    await podman.run(["secret", "rm", `${prefix}-api-keys`], { allowFailure: true });
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /**
   * The rendered objects podman can play, changed only where this host or podman needs it:
   * - this host's image and registry: the locally built image, the pinned model from the registry;
   * - names with a prefix: podman names volumes by the pod's volume names (`run`, `tmp`) host-wide;
   * - one replica, with a host port on loopback: podman plays each replica as a pod on this host,
   *   and a host port can be published once (a cluster reaches replicas through the Service);
   * - the Secret the README asks to create, and `optional: false` on its volume: podman 4.3 reads
   *   that field without checking that it is set;
   * - the pod's restart policy OnFailure, not a Deployment's Always: podman 4.3 gives the init
   *   container the pod's policy too (podman issue 16343), so with Always it is started again as
   *   soon as it ends (a second pull beside the server; and the play fails at times, finding the
   *   init container running when it removes it);
   * - the init container kept once it has run (podman's init container type `always`), so that its
   *   end and its log can be read;
   * - no liveness probe: podman turns an httpGet probe into a health check running `curl` in the
   *   container (the image has none, and a named port becomes port 0) that kills the container's
   *   first process when it fails; where systemd schedules health checks, it would stop the server.
   *   Startup and readiness probes podman ignores; the test asks /readyz itself.
   */
  function playable(objects: K8sObject[], hostPort: number): object[] {
    const out: object[] = [{ apiVersion: "v1", kind: "Secret", metadata: { name: `${prefix}-api-keys` }, data: { "api-keys": Buffer.from("kube-play-key\n").toString("base64") } }];
    for (const object of structuredClone(objects).filter((o) => PLAYED_KINDS.includes(o.kind))) {
      if (object.kind === "ConfigMap") Object.assign(object.data, { PINNED_MODELS: model, REGISTRY_INSECURE: registry.address });
      if (object.kind === "PersistentVolumeClaim") object.metadata.name = `${prefix}-models`;
      if (object.kind === "Deployment") {
        object.metadata.name = prefix;
        object.spec.replicas = 1;
        const spec = object.spec.template.spec;
        spec.restartPolicy = "OnFailure";
        // podman reads a Deployment's annotations from its own metadata, not its pod template's.
        object.metadata.annotations = { "io.podman.annotations.init.container.type": "always" };
        for (const volume of spec.volumes) {
          volume.name = `${prefix}-${volume.name}`;
          if (volume.persistentVolumeClaim) volume.persistentVolumeClaim.claimName = `${prefix}-models`;
          if (volume.secret) Object.assign(volume.secret, { secretName: `${prefix}-api-keys`, optional: false });
        }
        for (const container of [...spec.initContainers, ...spec.containers]) {
          container.image = IMAGE;
          for (const mount of container.volumeMounts) mount.name = `${prefix}-${mount.name}`;
        }
        delete spec.containers[0].livenessProbe;
        Object.assign(spec.containers[0].ports[0], { hostPort, hostIP: "127.0.0.1" });
      }
      out.push(object);
    }
    return out;
  }

  it("plays the Deployment, its ConfigMap and its claim; the Service, the budget and the monitor need a cluster", () => {
    expect(rendered.filter((o) => !PLAYED_KINDS.includes(o.kind)).map((o) => o.kind).sort()).toEqual(["PodDisruptionBudget", "Service", "ServiceMonitor"]);
  });

  it("runs its containers as uid 10001 on read-only root file systems", async () => {
    const { stdout } = await podman.run(["inspect", "--format", "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}", `${pod}-llamadock`]);
    expect(stdout.trim()).toBe("10001:10001 true");
  });

  it("gets ready: /readyz answers 200 through the host port once the pinned model is loaded", async () => {
    await until(async () => (await ask(target, "GET", "/readyz").catch(() => undefined))?.status === 200, "/readyz through the host port", 4800);
    expect((await ask(target, "GET", "/readyz")).json()).toEqual({ status: "ready" });
  }, 180_000);

  it("found the pinned model pulled by the init container", async () => {
    // The init container ran to its end, kept by podman once it has run (see `playable`).
    const init = await podman.run(["inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", `${pod}-pull-models`]);
    expect(init.stdout.trim()).toBe("exited 0");
    const pulled = await podman.run(["logs", `${pod}-pull-models`]);
    expect(pulled.stdout + pulled.stderr).toMatch(/Model pulled successfully/);
    const models = (await ask(target, "GET", "/models", undefined, { authorization: `Bearer ${key}` })).json() as { tags: string[] }[];
    expect(models.flatMap((m) => m.tags)).toEqual([model]);
    // On the claim, played as the podman volume of its name: what the init container wrote there.
    const { stdout } = await podman.run(["volume", "inspect", "--format", "{{.Mountpoint}}", `${prefix}-models`]);
    expect(readdirSync(join(stdout.trim(), "blobs", "sha256")).sort()).toEqual(blobs);
    // The server itself pulls a pinned model only when the store lacks it, and says so.
    const logs = await podman.run(["logs", `${pod}-llamadock`]);
    expect(logs.stdout + logs.stderr).not.toMatch(/pinned model .*: pulling/);
  });

  it("answers a chat through the host port with the Secret's key, and refuses one without", async () => {
    const body = { model, messages: [{ role: "user", content: "hi" }], max_tokens: 4 };
    expect((await ask(target, "POST", "/engines/v1/chat/completions", body)).status).toBe(401);
    const chat = await ask(target, "POST", "/engines/v1/chat/completions", body, { authorization: `Bearer ${key}` });
    expect(chat.status, chat.body).toBe(200);
    expect(chat.json().choices[0].message.role).toBe("assistant");
  }, 120_000);
});
