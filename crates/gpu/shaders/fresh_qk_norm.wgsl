// attention_in_fresh.wgsl's query and key heads normed on the way in (Qwen3's per-head q/k RMS
// norms, rms_norm_qk.wgsl folded into the attention dispatch): the workgroup takes its query
// head's and its key head's factors through rms_scale.wgsl (the same sums and tree: the same bits),
// `x` being the product's output bound a second time, and rope_pair.wgsl reads each value as
// rms_norm_qk.wgsl writes it, (x · factor) · weight.

override N: u32;
override EPS: f32;

@group(0) @binding(9) var<storage, read> x: array<f32>;
@group(0) @binding(10) var<storage, read> wq: array<f32>;
@group(0) @binding(11) var<storage, read> wk: array<f32>;

// Value i of the row rms_scale.wgsl norms.
fn rms_in(i: u32) -> f32 {
    return x[i];
}

var<private> scale_q: f32;
var<private> scale_k: f32;

// Every invocation calls it (rms_scale's barriers), before any `rope_in`.
fn norm_qk(h: u32, g: u32, lid: u32) {
    scale_q = rms_scale(h * HEAD_DIM, lid);
    // Every invocation has read the query's factor before the tree is reused.
    workgroupBarrier();
    scale_k = rms_scale(N_HEAD * HEAD_DIM + g * HEAD_DIM, lid);
}

// Value `at` of the stacked output's query and key heads (the only ones rope_pair reads), normed.
fn rope_in(at: u32) -> f32 {
    let q_len = N_HEAD * HEAD_DIM;
    if at < q_len {
        return (qkv[at] * scale_q) * wq[at % HEAD_DIM];
    }
    return (qkv[at] * scale_k) * wk[(at - q_len) % HEAD_DIM];
}
