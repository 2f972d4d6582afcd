// Qwen3's per-head norms of a stacked Q/K/V product's output in one dispatch: the ROWS_Q query
// heads then the ROWS_K key heads of x (rows of N) normed as rms_norm.wgsl norms them (the same
// sums, tree and expressions: the same bits), the query heads with `wq`, the key heads with `wk`,
// into the same places of y; the TAIL values after them (the value heads) copied. One workgroup a
// head, then one per 256 values of the tail.

override ROWS_Q: u32;
override ROWS_K: u32;
override N: u32;
override EPS: f32;
override TAIL: u32;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> wq: array<f32>;
@group(0) @binding(2) var<storage, read> wk: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// Value i of the row rms_scale.wgsl norms.
fn rms_in(i: u32) -> f32 {
    return x[i];
}

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let row = wid.x + wid.y * nwg.x;
    let rows = ROWS_Q + ROWS_K;
    if row >= rows {
        // The tail: a copy (uniform per workgroup).
        let i = rows * N + (row - rows) * 256u + lid;
        if i < rows * N + TAIL {
            y[i] = x[i];
        }
        return;
    }
    let base = row * N;
    let scale = rms_scale(base, lid);
    if row < ROWS_Q {
        for (var i = lid; i < N; i += 256u) {
            y[base + i] = (x[base + i] * scale) * wq[i];
        }
    } else {
        for (var i = lid; i < N; i += 256u) {
            y[base + i] = (x[base + i] * scale) * wk[i];
        }
    }
}
