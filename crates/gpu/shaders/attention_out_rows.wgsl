// The attention head's output as f32 values at row `step[1]` of token-major output rows (see
// attention_decode.wgsl and attention_in_rows.wgsl).

@group(0) @binding(5) var<storage, read_write> out: array<f32>;

fn emit(h: u32, lid: u32, acc: array<f32, 4>, l: f32) {
    for (var j = 0u; j < 4u; j++) {
        let d = lid + 256u * j;
        if d < HEAD_DIM_V {
            out[(step[1] * N_HEAD + h) * HEAD_DIM_V + d] = acc[j] / l;
        }
    }
}
