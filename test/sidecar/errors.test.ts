import { describe, expect, it } from "vitest";
import { explainExit } from "../../sidecar/errors.ts";

// Lines as llama-server v0.5.0 prints them (captured from the real binary).
const exit1 = { code: 1, signal: null };
const cases: Array<[string, string, string, RegExp]> = [
  [
    "missing model file",
    "E gguf_init_from_file: failed to open GGUF file '/m/x.gguf' (No such file or directory)\nE llama_model_load: error loading model: llama_model_loader: failed to load model from /m/x.gguf",
    "model_not_found",
    /^model file not found: \/m\/x\.gguf$/,
  ],
  ["unreadable model file", "E gguf_init_from_file: failed to open GGUF file '/m/x.gguf' (Permission denied)", "model_unreadable", /Permission denied/],
  ["not a GGUF", "E gguf_init_from_reader: invalid magic characters: 'W?)?', expected 'GGUF'\nE llama_model_load: error loading model: x", "invalid_model", /not a GGUF file/],
  [
    "truncated GGUF",
    "E llama_model_load: error loading model: tensor 'output.weight' data is not within the file bounds, model is corrupted or incomplete",
    "invalid_model",
    /corrupt or incomplete/,
  ],
  ["unknown architecture", "E llama_model_load: error loading model: unknown model architecture: 'mamba9'", "invalid_model", /unsupported model architecture: mamba9/],
  [
    "projector that is not one",
    "E mtmd_init_from_file: error: Failed to load CLIP model from /m/p.gguf\nE srv    load_model: failed to load multimodal model, '/m/p.gguf'\nE srv  llama_server: exiting due to model loading error",
    "invalid_model",
    /^cannot load the multimodal projector \/m\/p\.gguf$/,
  ],
  ["CUDA out of memory", "ggml_cuda_host_malloc: cudaMalloc failed: out of memory", "out_of_memory", /not enough GPU memory/],
  [
    "CUDA out of memory at load, with the numbers",
    "I llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) (0000:01:00.0) - 1530 MiB free\nE ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4403.50 MiB on device 0: cudaMalloc failed: out of memory\nE alloc_tensor_range: failed to allocate CUDA0 buffer of size 4617404416\nE llama_model_load: error loading model: unable to allocate CUDA0 buffer",
    "out_of_memory",
    /^not enough GPU memory for the model: llama-server could not allocate 4403\.50 MiB on device 0 \(1530 MiB free\) \(try fewer GPU layers/,
  ],
  [
    "CUDA buffer of a size",
    "E alloc_tensor_range: failed to allocate CUDA1 buffer of size 1073741824",
    "out_of_memory",
    /not enough GPU memory for the model: llama-server could not allocate 1024\.00 MiB on CUDA1 \(/,
  ],
  ["host out of memory", "E ggml_aligned_malloc: insufficient memory (attempted to allocate 48828.12 MB)", "out_of_memory", /not enough memory/],
  ["kv cache allocation", "E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache", "out_of_memory", /not enough memory/],
  ["unknown flag", "I srv  llama_server: initializing ...\nerror: invalid argument: --bogus", "bad_argument", /does not know the option --bogus/],
  ["bad flag value", 'error while handling argument "--pooling": invalid value\nusage:', "bad_argument", /--pooling: invalid value/],
  ["socket taken", "E srv  start: couldn't bind HTTP server socket, hostname: /r/a.sock, port: 0", "socket_in_use", /could not listen/],
  ["other load error", "E llama_model_load: error loading model: something new", "invalid_model", /cannot load the model: something new/],
];

describe("explainExit", () => {
  it.each(cases)("%s", (_name, tail, code, message) => {
    const error = explainExit(exit1, tail);
    expect(error.code).toBe(code);
    expect(error.message).toMatch(message);
    expect(error.tail).toBe(tail);
  });

  it("falls back to the exit status and the last error line", () => {
    const error = explainExit({ code: null, signal: "SIGKILL" }, "I loading\nE srv  something odd\nI more");
    expect(error.code).toBe("exited");
    expect(error.message).toBe("llama-server killed by SIGKILL: E srv  something odd");
  });

  it("says only the exit status when the output names no error", () => {
    expect(explainExit({ code: 3, signal: null }, "I fine\n").message).toBe("llama-server exited with code 3");
  });
});
