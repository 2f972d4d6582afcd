// RMS norm of ROWS rows of N values: y = x · (1 / sqrt(mean(x²) + EPS)) · w, one workgroup a row.
// The CPU sums the squares in f64 in order; here each invocation sums a strided part in f32 and
// the parts meet in a tree, so the sum differs by the order's rounding only.

override ROWS: u32;
override N: u32;
override EPS: f32;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

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
    if row >= ROWS {
        return;
    }
    let base = row * N;
    let scale = rms_scale(base, lid);
    for (var i = lid; i < N; i += 256u) {
        y[base + i] = (x[base + i] * scale) * w[i];
    }
}
