// attention_in_fresh.wgsl's rotated keys also written, as f32, to `keys` (N_HEAD_KV heads of
// HEAD_DIM): the values rope.wgsl gives (a host cache stores them from there).
@group(0) @binding(8) var<storage, read_write> keys: array<f32>;

fn keep_key(at: u32, x: f32) {
    keys[at] = x;
}
