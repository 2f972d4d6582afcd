// x += y over N values (the residual add); with Y_LEN, y is one row of Y_LEN added to each of
// x's rows (a bias on a chunk's token-major rows).

override N: u32;
override Y_LEN: u32 = 0u;

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if i < N {
        if Y_LEN > 0u {
            x[i] += y[i % max(Y_LEN, 1u)];
        } else {
            x[i] += y[i];
        }
    }
}
