// dst[r · DST_STRIDE + DST_AT + i] = src[r · SRC_STRIDE + SRC_AT + i] for r < ROWS, i < WIDTH: a
// strided block copy inside a compute pass (a stacked product's token-major rows split into its
// parts' tensors, e.g. Q | K | V rows into Q, K and V).

override ROWS: u32;
override WIDTH: u32;
override SRC_STRIDE: u32;
override SRC_AT: u32;
override DST_STRIDE: u32;
override DST_AT: u32;

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let j = gid.x + gid.y * nwg.x * 256u;
    if j < ROWS * WIDTH {
        let r = j / WIDTH;
        let i = j % WIDTH;
        dst[r * DST_STRIDE + DST_AT + i] = src[r * SRC_STRIDE + SRC_AT + i];
    }
}
