import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { isPrivateAddress, policeBody } from "../../src/inference/body-policy.ts";

// What a body may ask of llama-server: each refused field and each refused media URL is a 400
// before anything is forwarded; what clients send every day passes.

const off = { allowRemoteMedia: false };
const on = { allowRemoteMedia: true };
const refusal = (body: unknown, policy = off) => {
  try {
    policeBody(body, policy);
    return undefined;
  } catch (error) {
    expect(error).toBeInstanceOf(HttpError);
    return `${(error as HttpError).status} ${(error as HttpError).code}`;
  }
};
const image = (url: string) => ({ messages: [{ role: "user", content: [{ type: "text", text: "see" }, { type: "image_url", image_url: { url } }] }] });

describe("fields", () => {
  it.each([
    [{ n_discard: -1 }, "400 field_not_allowed"],
    [{ n_discard: 4 }, undefined],
    [{ n_keep: -2 }, "400 field_not_allowed"],
    [{ n_keep: -1 }, undefined],
    [{ n_probs: 21 }, "400 field_not_allowed"],
    [{ n_probs: 5 }, undefined],
    [{ n_probs: "5" }, "400 field_not_allowed"],
    [{ id_slot: 0 }, "400 field_not_allowed"],
    [{ id_slot: -1 }, undefined],
    [{ n_cmpl: 100 }, "400 field_not_allowed"],
    [{ n: 0 }, "400 field_not_allowed"],
    [{ n: 2 }, undefined],
    [{ model: "ai/tiny", temperature: 0.7, max_tokens: 12, stream: true }, undefined],
  ])("%j: %s", (body, expected) => {
    expect(refusal(body)).toBe(expected);
  });
});

describe("media URLs", () => {
  it.each([
    ["data:image/png;base64,iVBORw0KGgo=", off, undefined],
    ["file:///etc/passwd", on, "400 media_not_allowed"],
    ["unix:/var/run/docker.sock", on, "400 media_not_allowed"],
    ["https://example.com/cat.png", off, "400 media_not_allowed"],
    ["https://example.com/cat.png", on, undefined],
    ["http://127.0.0.1:2375/containers/json", on, "400 media_not_allowed"],
    ["http://169.254.169.254/latest/meta-data", on, "400 media_not_allowed"],
    ["http://10.0.0.8/x.png", on, "400 media_not_allowed"],
    ["http://[fd00::1]/x.png", on, "400 media_not_allowed"],
    ["http://localhost/x.png", on, "400 media_not_allowed"],
    ["http://intranet/x.png", on, "400 media_not_allowed"],
    ["not a url", on, "400 media_not_allowed"],
  ])("%s (remote media %j): %s", (url, policy, expected) => {
    expect(refusal(image(url), policy)).toBe(expected);
  });

  it("checks Anthropic image sources and audio URLs too", () => {
    expect(refusal({ messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: "file:///x" } }] }] }, on)).toBe("400 media_not_allowed");
    expect(refusal({ messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { url: "http://10.1.1.1/a.wav" } }] }] }, on)).toBe("400 media_not_allowed");
    expect(refusal({ messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } }] }] }, off)).toBeUndefined();
  });

  it.each([
    ["192.168.0.1", true],
    ["172.20.1.1", true],
    ["172.32.1.1", false],
    ["100.64.0.1", true],
    ["8.8.8.8", false],
    ["fe80::1", true],
    ["example.com", false],
    ["printer.local", true],
  ])("isPrivateAddress(%s) = %s", (host, expected) => {
    expect(isPrivateAddress(host)).toBe(expected);
  });
});
