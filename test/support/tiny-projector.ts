// A tiny random-weight multimodal projector (mmproj) in GGUF v3, which llama-server loads with
// `--mmproj` beside the tiny chat model: tests send real images through the real vision path
// without downloading a model. Same seed, same bytes.
//
// Its type is llava's, `clip.projector_type = "mlp"`, the simplest that llama.cpp's loader takes
// (tools/mtmd/clip.cpp): no special tokens in the text model's vocabulary (an image is its
// embeddings alone, between the prompt's text), a fixed image size (any image is resized to it),
// and a ViT of standard blocks whose output a two-layer MLP projects to the text model's width.
// Shape: 32x32 pixel images cut into 8x8 patches (16 image tokens), embedding 32, 2 heads,
// feed-forward 64, 2 blocks of which llava runs the first (it reads the next-to-last block's
// output), then 32 -> text width -> text width. Every tensor f32, no biases but the MLP's (~120 KB).
import { prng, T_ARRAY, T_BOOL, T_FLOAT32, T_STRING, u32, writeGguf, type MetaValue, type Tensor } from "./tiny-gguf.ts";

export interface TinyProjectorOptions {
  /** PRNG seed for the weights; the default gives the same file every time. */
  seed?: number;
  /** The text model's embedding length: llama-server refuses a projector whose output differs. */
  textEmbedding?: number;
}

const IMAGE_SIZE = 32;
const PATCH_SIZE = 8;
const N_EMBD = 32;
const N_HEAD = 2;
const N_FF = 64;
const N_LAYER = 2;
const TEXT_EMBD = 64;

/** How many tokens one image takes in a prompt: one per patch (llava adds no markers of its own). */
export const IMAGE_TOKENS = (IMAGE_SIZE / PATCH_SIZE) ** 2;

const f32 = (value: number): MetaValue => ({ type: T_FLOAT32, value });
const f32s = (value: number[]): MetaValue => ({ type: T_ARRAY, of: T_FLOAT32, value });

/** The keys the loader requires (it throws "Key not found" without one), and nothing else. */
function metadata(textEmbedding: number): Array<[string, MetaValue]> {
  return [
    ["clip.has_vision_encoder", { type: T_BOOL, value: true }],
    ["clip.projector_type", { type: T_STRING, value: "mlp" }],
    ["clip.vision.embedding_length", u32(N_EMBD)],
    ["clip.vision.attention.head_count", u32(N_HEAD)],
    ["clip.vision.feed_forward_length", u32(N_FF)],
    ["clip.vision.block_count", u32(N_LAYER)],
    // Read but unused by "mlp": the MLP's last tensor says the output width.
    ["clip.vision.projection_dim", u32(textEmbedding)],
    ["clip.vision.attention.layer_norm_epsilon", f32(1e-6)],
    ["clip.vision.image_size", u32(IMAGE_SIZE)],
    ["clip.vision.patch_size", u32(PATCH_SIZE)],
    // Pixels from [0, 1] to [-1, 1].
    ["clip.vision.image_mean", f32s([0.5, 0.5, 0.5])],
    ["clip.vision.image_std", f32s([0.5, 0.5, 0.5])],
  ];
}

/** GGUF order: dims[0] is a matrix's input width, dims[1] its output width. */
function tensors(textEmbedding: number): Tensor[] {
  const list: Tensor[] = [
    // A convolution's kernel: [width, height, channels in, channels out].
    { name: "v.patch_embd.weight", dims: [PATCH_SIZE, PATCH_SIZE, 3, N_EMBD], fill: "random" },
    { name: "v.position_embd.weight", dims: [N_EMBD, IMAGE_TOKENS], fill: "random" },
  ];
  for (let block = 0; block < N_LAYER; block++) {
    const p = `v.blk.${block}`;
    list.push(
      { name: `${p}.ln1.weight`, dims: [N_EMBD], fill: "ones" },
      { name: `${p}.attn_q.weight`, dims: [N_EMBD, N_EMBD], fill: "random" },
      { name: `${p}.attn_k.weight`, dims: [N_EMBD, N_EMBD], fill: "random" },
      { name: `${p}.attn_v.weight`, dims: [N_EMBD, N_EMBD], fill: "random" },
      { name: `${p}.attn_out.weight`, dims: [N_EMBD, N_EMBD], fill: "random" },
      { name: `${p}.ln2.weight`, dims: [N_EMBD], fill: "ones" },
      // Feed-forward wider than the embedding: the loader swaps up and down of old llava files
      // when down's input width equals the embedding's.
      { name: `${p}.ffn_up.weight`, dims: [N_EMBD, N_FF], fill: "random" },
      { name: `${p}.ffn_down.weight`, dims: [N_FF, N_EMBD], fill: "random" },
    );
  }
  list.push(
    { name: "mm.0.weight", dims: [N_EMBD, textEmbedding], fill: "random" },
    { name: "mm.0.bias", dims: [textEmbedding], fill: "random" },
    { name: "mm.2.weight", dims: [textEmbedding, textEmbedding], fill: "random" },
    { name: "mm.2.bias", dims: [textEmbedding], fill: "random" },
  );
  return list;
}

/** The tiny projector as GGUF v3 bytes; deterministic for a given seed. */
export function tinyProjectorGguf(options: TinyProjectorOptions = {}): Uint8Array {
  const width = options.textEmbedding ?? TEXT_EMBD;
  return writeGguf(metadata(width), tensors(width), prng(options.seed ?? 0x5ee1a9e));
}
