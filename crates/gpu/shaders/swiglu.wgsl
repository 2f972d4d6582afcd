// SwiGLU's gate in place over N values: gate = silu(gate) · up, silu(g) = g / (1 + exp(−g)).

override N: u32;

@group(0) @binding(0) var<storage, read_write> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if i < N {
        let g = gate[i];
        gate[i] = (g / (1.0 + exp(-g))) * up[i];
    }
}
