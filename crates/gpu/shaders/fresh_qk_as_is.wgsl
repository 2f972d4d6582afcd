// attention_in_fresh.wgsl's query and key heads as the product left them (already normed, or a
// model without q/k norms).
fn norm_qk(h: u32, g: u32, lid: u32) {}

fn rope_in(at: u32) -> f32 {
    return qkv[at];
}
