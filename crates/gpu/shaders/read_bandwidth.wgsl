// The device's read-bandwidth ceiling for the shaders' own access pattern: every invocation sums
// 16-byte words at a grid stride and writes one value (so the reads cannot be dropped).

@group(0) @binding(0) var<storage, read> data: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let stride = nwg.x * 256u;
    var acc = vec4<u32>(0u);
    for (var i = gid.x; i < arrayLength(&data); i += stride) {
        acc ^= data[i];
    }
    out[gid.x] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
