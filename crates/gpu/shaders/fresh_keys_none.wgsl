// attention_in_fresh.wgsl's rotated keys go to the cache only.
fn keep_key(at: u32, x: f32) {}
