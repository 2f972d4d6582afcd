// The Q1_0 product's activation read from the output piece's own `words` / `block_meta`
// (q1_0_gemv.wgsl's interface, as q1_0_act_storage.wgsl's): for q1_0_out_norm.wgsl where the
// next activation it writes is the tensor the product reads (Qwen3-8B's attention output and
// its residual both 4096 values of Q8_0) — a buffer cannot be bound read-only and read-write in
// one dispatch, and every workgroup has read it before the tail writes it (q1_0_out_norm.wgsl).

fn prologue(lid: u32) {}

fn act_word(i: u32) -> vec4<u32> {
    let at = 4u * i;
    return vec4<u32>(words[at], words[at + 1u], words[at + 2u], words[at + 3u]);
}

fn act_meta_word(i: u32) -> vec4<u32> {
    let at = 4u * i;
    return vec4<u32>(block_meta[at], block_meta[at + 1u], block_meta[at + 2u], block_meta[at + 3u]);
}
